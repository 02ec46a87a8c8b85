"""The strategy pictures draw each strategy and refuse what they cannot draw."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.strategy_pictures import STRATEGIES, draw_cluster_topology, draw_data_flow, draw_data_service  # noqa: E402


def test_one_titled_panel_per_strategy():
    figure = draw_data_flow(devices=3)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["MirroredStrategy: a copy per device", "CentralStorageStrategy: one copy",
                      "ParameterServerStrategy: asynchronous"]
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert sum(text.startswith("CPU:") for text in texts) == 3
    plt.close(figure)


def test_topology_names_every_process():
    figure = draw_cluster_topology(workers=2, parameter_servers=3)
    mwms, ps = ([t.get_text() for t in ax.texts] for ax in figure.axes)
    assert any("worker 0 (chief)" in t for t in mwms) and sum(t.startswith("worker") for t in mwms) == 2
    assert sum(t.startswith("ps ") for t in ps) == 3 and any("coordinator" in t for t in ps)
    plt.close(figure)


def test_parameter_server_links_go_both_ways():
    """The coordinator gets results back from the workers and creates and reads the variables on every ps."""
    figure = draw_cluster_topology(workers=3, parameter_servers=2)
    links = {patch.get_gid(): patch for patch in figure.axes[1].patches if patch.get_gid()}
    expected = ({f"coordinator-worker {w}" for w in range(3)} | {f"coordinator-ps {p}" for p in range(2)}
                | {f"worker {w}-ps {p}" for w in range(3) for p in range(2)})
    assert set(links) == expected
    assert all(type(link.get_arrowstyle()).__name__ == "CurveFilledAB" for link in links.values())  # "<|-|>": two heads
    plt.close(figure)


@pytest.mark.parametrize("kwargs, words", [
    ({"strategies": ["mirored"]}, "non-empty list of"),
    ({"strategies": []}, "non-empty list of"),
    ({"devices": 9}, "between 2 and 6"),
])
def test_data_flow_refuses_what_it_cannot_draw(kwargs, words):
    with pytest.raises(ValueError, match=words):
        draw_data_flow(**kwargs)
    assert STRATEGIES == ("mirrored", "central storage", "parameter server")


def test_topology_refuses_counts_out_of_range():
    with pytest.raises(ValueError, match="workers must be 2–4"):
        draw_cluster_topology(workers=5)


def test_data_service_links_every_trainer_to_the_dispatcher_and_every_worker():
    figure = draw_data_service(workers=3, trainers=2)
    links = {patch.get_gid() for patch in figure.axes[0].patches if patch.get_gid()}
    assert links == ({f"dispatcher-worker {w}" for w in range(3)} | {f"trainer {t}-dispatcher" for t in range(2)}
                     | {f"worker {w}-trainer {t}" for w in range(3) for t in range(2)})
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert sum(t.startswith("tf.data worker") for t in texts) == 3 and sum(t.startswith("trainer") for t in texts) == 2
    plt.close(figure)


@pytest.mark.parametrize("workers, trainers", [(0, 2), (2, 5)])
def test_data_service_refuses_what_does_not_fit(workers, trainers):
    with pytest.raises(ValueError, match="must each be 1–4"):
        draw_data_service(workers=workers, trainers=trainers)
