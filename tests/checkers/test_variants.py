"""Per-student variants: seeds, draws, the texts filled from them, and the checkers on many draws (issue 40).

Each varied exercise is checked on many draws: every draw is a valid question, its filled solution scores full
marks, and the aimed hints still recognise the typical mistakes."""
import itertools
import json
import random
import re
import textwrap

import pytest

from course_utils.checkers import chapter_definition, ch4, ch5_budget, ch8, exercises
from course_utils.checkers.core import GRADED
from course_utils.checkers.variants import VARIANT_ENV, fill, student_rng, student_variant, variant_from_env, \
    variant_label
from course_utils.grading.handout import HIDDEN_HINT, strip_checker_source
from course_utils.grading.session import serve_hint

KEY = bytes(range(32))
DRAWS = 200
FEWEST_DISTINCT = {12: 18}  # 12.1 states two small numbers (service workers, trainers): 41 variants in all
NEIGHBOUR_SHARE = {9: 1 / 2}  # 9.3: each case has two reachable answers (its own or "error", as its files meet the
# workers), so a neighbour's four answers are right on a little under half of the cases (measured: 1.75 of 4)
VARIED = {1: ("q1", "q2"), 2: ("q3",), 3: ("q1", "q2"), 4: ("q3", "q4", "q5"), 5: ("q5",), 7: ("q2", "q4"), 8: ("q1",),
          9: ("q3",), 12: ("q1",)}  # the chapters converted so far, and their exercises that vary


def draws(cls, count=DRAWS):
    rng = random.Random(40)
    return [cls.draw(rng) for _ in range(count)]


def item(chapter, name, params, mode="self-study"):
    return chapter_definition(chapter).bind(mode, {name: params}).__getattribute__(name)


def solution_answers(exercise):
    """The answers the exercise's filled solution cell defines (its code run without the check call)."""
    cell = exercise.rendered_cells()[f"ch{exercise.chapter}-{exercise.name}"]
    cell = cell.split("# BEGIN SOLUTION", 1)[1].split("\n", 1)[1]  # the solution block (and the check after it)
    code = "\n".join(line for line in cell.splitlines() if not line.startswith(("# END", "ex.", "print(")))
    namespace = {"json": json}  # what the notebooks' set-up imports and the solutions use
    exec(textwrap.dedent(code), namespace)  # noqa: S102 - the course's own solution text
    return [namespace[name] for name in exercise.arguments]


def test_fill_replaces_only_double_braces_and_names_a_missing_value():
    assert fill("{'a': {{x}}} {x}", {"x": 3}) == "{'a': 3} {x}"
    with pytest.raises(KeyError, match=r"\{\{y\}\}.*text_values"):
        fill("{{y}}", {"x": 3})


def test_seeds_are_deterministic_per_key_student_and_exercise():
    one = student_rng(KEY, "alice", 4, "q3").random()
    assert one == student_rng(KEY, "alice", 4, "q3").random()
    assert one != student_rng(KEY, "alice", 4, "q5").random() != student_rng(KEY, "bob", 4, "q3").random()
    assert one != student_rng(bytes(32), "alice", 4, "q3").random()
    with pytest.raises(TypeError, match="bytes"):
        student_rng("a key as text", "alice", 4, "q3")


@pytest.mark.parametrize("chapter", sorted(VARIED))
def test_a_class_of_30_gets_30_variants_never_the_self_study_one(chapter):
    definition = chapter_definition(chapter)
    assert sorted(n for n, c in definition.named.items() if c.defaults) == sorted(VARIED[chapter])
    variants = [student_variant(definition, KEY, f"s{n:03d}") for n in range(30)]
    assert variants[0] == student_variant(definition, KEY, "s000")  # the same key and id: the same variant
    for name in VARIED[chapter]:
        assert all(v[name] != definition.named[name].defaults for v in variants)
        print(f"chapter {chapter} {name}: {len({variant_label(v[name]) for v in variants})} distinct of 30")
    distinct = len({variant_label(v) for v in variants})
    print(f"chapter {chapter}: {distinct} distinct variants in a class of 30")
    assert distinct >= FEWEST_DISTINCT.get(chapter, 27)  # chapter 2 varies only the order of six scenarios (720
    # orders): a few pairs share one


@pytest.mark.parametrize("chapter", sorted(VARIED))
def test_a_neighbours_answers_earn_well_below_half_of_the_varied_points(chapter):
    """Over a class of 40, each student's answers judged against the next student's variant."""
    definition = chapter_definition(chapter)
    variants = [student_variant(definition, KEY, f"s{n:03d}") for n in range(40)]
    most = sum(definition.max_points()[name] for name in VARIED[chapter])
    earned = []
    for mine, theirs in zip(variants, variants[1:] + variants[:1]):
        own, other = definition.bind(variant=mine), definition.bind(variant=theirs)
        earned.append(sum(getattr(own, name).evaluate(*solution_answers(getattr(other, name))).points
                          for name in VARIED[chapter]))
    print(f"chapter {chapter}: a neighbour's answers earn {sum(earned) / len(earned):.2f} of {most} points on "
          f"average (at most {max(earned)}; {earned.count(most)} of 40 full marks)")
    assert sum(earned) / len(earned) < most * NEIGHBOUR_SHARE.get(chapter, 1 / 4) and max(earned) <= most


def test_the_kernel_reads_the_variant_the_grader_passes(monkeypatch):
    assert variant_from_env({}) is None
    with pytest.raises(ValueError, match=VARIANT_ENV):
        variant_from_env({VARIANT_ENV: "[1, 2]"})
    params = draws(ch4.LayoutCost, 1)[0]
    monkeypatch.setenv(VARIANT_ENV, '{"q5": %s}' % str(params).replace("'", '"'))
    assert exercises(4).q5.params == params
    monkeypatch.delenv(VARIANT_ENV)
    assert exercises(4).q5.params == ch4.LayoutCost.defaults


def test_a_variant_with_unknown_parameters_or_exercises_is_refused():
    with pytest.raises(ValueError, match="parameters"):
        chapter_definition(4).bind(variant={"q5": {"batch": 2, "width": 3}})
    with pytest.raises(ValueError, match="q9"):
        chapter_definition(4).bind(variant={"q9": {}})


def test_ch1_q1_every_draw_is_valid_scores_its_solution_and_the_mistakes_get_their_hint():
    from course_utils.checkers import ch1

    for params in draws(ch1.PredictPlacement, 400):
        cpus, a, missing = params["cpus"], params["a"], params["missing"]
        assert params != ch1.PLACEMENT and 4 <= cpus <= 6 and cpus <= missing < 8, params
        assert len({a, params["c_outer"], params["c_inner"]}) == 3 and a not in (params["e_outer"], params["f"])
        assert 0 not in (a, params["c_outer"], params["c_inner"], params["e_outer"], params["f"]), params
        exercise = item(1, "q1", params)
        right = solution_answers(exercise)[0]
        assert right == {"b": 0, "c": params["c_inner"], "d": params["c_outer"], "e": 0, "f": params["f"]}
        assert exercise.evaluate(right).points == 2
        script = exercise.text_values()["script"]
        assert f"```python\n{script}```" in exercise.rendered_cells()["c02"]
        assert f'PLACEMENT_SCRIPT = """\n{script}"""' in exercise.rendered_cells()["c04-watch"]
        assert f"**{cpus}** logical CPUs, `CPU:0` to `CPU:{cpus - 1}`" in exercise.rendered_cells()["c02"]
        mistakes = [("b", a, "does not follow its input tensors"), ("c", params["c_outer"], "another block is open"),
                    ("c", a, "does not follow its input tensors"), ("d", params["c_inner"], "does not follow"),
                    ("d", 0, "which tf.device blocks are still open"), ("e", params["e_outer"], "does not fall back"),
                    ("e", missing, f"no CPU:{missing}, although this notebook's kernel does"),
                    ("e", "error", "nothing on the lines up to it raises"), ("f", a, "does not follow"),
                    ("f", "error", "compare what this line asks for"),
                    ("b", cpus, f"no CPU:{cpus}: its CPUs are CPU:0 to CPU:{cpus - 1}, although")]
        for key, wrong, fragment in mistakes:
            result = exercise.evaluate(dict(right, **{key: wrong}))
            assert result.points == 1 and fragment in result.message, (params, key, wrong, str(result))
            assert ch1._reference_placement_reasons(params)[key] in result.message
        kernel = exercise.evaluate(dict(right, e=missing, f="error"))
        assert f"script's process ({cpus} CPUs)" in kernel.message and kernel.points == 0
        assert f"({cpus} logical CPUs, not this notebook's 8)" in exercise.hint_body(1)


@pytest.mark.parametrize("params", [
    {"cpus": 5, "a": 1, "c_outer": 4, "c_inner": 3, "e_outer": 2, "missing": 7, "f": 4},
    {"cpus": 6, "a": 4, "c_outer": 1, "c_inner": 5, "e_outer": 5, "missing": 6, "f": 3}])
def test_ch1_q1_the_watch_cell_runs_the_variants_script_where_the_solution_says(params, capsys):
    from course_utils.checkers import ch1

    exercise = item(1, "q1", params)
    placements = solution_answers(exercise)[0]
    shown = type("Shown", (), {"answer_shown": staticmethod(lambda: True)})
    namespace = {"ex": type("Ex", (), {"q1": shown}), "placements": placements}
    exec(exercise.rendered_cells()["c04-watch"], namespace)  # noqa: S102 - the course's own cell
    assert {name: ch1._placement(where) for name, where in namespace["ran_on"].items()} == placements, \
        capsys.readouterr().out


def test_ch1_q2_every_draw_is_what_tensorflow_does_scores_its_solution_and_gets_the_aimed_hints():
    import tensorflow as tf
    from course_utils.checkers import ch1

    for number, params in enumerate(draws(ch1.PredictTracing, 40)):
        exercise = item(1, "q2", params)
        right = solution_answers(exercise)[0]
        assert right == ch1._reference_traces(params["calls"]) and exercise.evaluate(right).points == 2
        if number < 10:  # measured: a fresh tf.function, called as the question's table says
            traced = []
            g = tf.function(lambda x, training: traced.append(1) or (x + 1 if training else x - 1))
            observed = []
            for dtype, values, training in params["calls"]:
                before = len(traced)
                g(tf.constant(values, dtype=dtype), training=training)
                observed.append(len(traced) > before)
            assert observed == right, params
        ideas = ch1._reference_call_ideas(params["calls"])
        for index, idea in enumerate(ideas):
            if idea == "first":
                continue
            flipped = list(right)
            flipped[index] = not flipped[index]
            result = exercise.evaluate(flipped)
            assert result.points == 1 and ch1.IDEAS[idea] in result.message, (params, index, str(result))
            assert ch1._reference_why_traces(params["calls"])[index] in exercise.evaluate(flipped).message
        table = exercise.rendered_cells()["c05"]
        assert all(f"| {n} | `{ch1.call_text(call)}` |" in table for n, call in enumerate(params["calls"], 1))


def test_ch2_q3_every_order_scores_its_solution_full_marks_and_the_aimed_hints_follow_the_scenario():
    from course_utils.checkers import ch2

    assert len({params["order"] for params in draws(ch2.PickStrategy, 6000)}) == 720  # every order comes up
    truth = ch2._reference_scenario_strategies()
    for order in {"".join(p) for p in itertools.permutations("abcdef")} - {"abcdef"}:
        exercise = item(2, "q3", {"order": order})
        right = solution_answers(exercise)[0]
        assert right == {letter: truth[key] for letter, key in zip("abcdef", order)}
        assert exercise.evaluate(right).points == 6
        text = exercise.rendered_cells()["c08"]
        f, a = "abcdef"[order.index("f")], "abcdef"[order.index("a")]
        assert f"- **{f}.** A single weight matrix is too large" in text
        assert "variable_partitioner" in exercise.evaluate(dict(right, **{f: "ParameterServerStrategy"})).message
        assert "several machines" in exercise.evaluate(dict(right, **{a: "MultiWorkerMirroredStrategy"})).message


def _slurm_step(params):
    """What srun sets in the task of exercise 3.1's variant that the question asks about."""
    from course_utils.checkers import ch3_config

    nodes = ch3_config.slurm_nodes(params)
    asked = f"{params['prefix']}{params['asked']}"
    return {"SLURM_STEP_NUM_TASKS": str(len(nodes)), "SLURM_STEP_NODELIST": ch3_config.slurm_nodelist(params),
            "SLURM_STEP_TASKS_PER_NODE": f"1(x{len(nodes)})", "SLURM_PROCID": str(nodes.index(asked)),
            "SLURMD_NODENAME": asked}


def test_ch3_q1_every_draw_keeps_its_point_and_its_solution_is_what_slurm_tf_config_builds(monkeypatch, cpus8):
    """Every draw: text order is not Slurm's order and moves every node (so TensorFlow's resolver tells the asked
    task another node's address), the asked task is a worker whose index is not its rank, and the filled solution
    is what the chapter's slurm_tf_config builds from srun's variables and scores full marks; on a few draws
    TensorFlow's own SlurmClusterResolver gives its text-order answer, which earns nothing and gets its hint."""
    import inspect

    import tensorflow as tf
    from course_utils.checkers import ch3_config, reach
    from course_utils.cluster.slurm import slurm_tf_config

    assert inspect.signature(slurm_tf_config).parameters["port_base"].default == ch3_config.SLURM_DEFAULTS["port"]
    for number, params in enumerate(draws(ch3_config.WorkerConfig)):
        assert params != ch3_config.WorkerConfig.defaults
        nodes, asked = ch3_config.slurm_nodes(params), f"{params['prefix']}{params['asked']}"
        text_order = sorted(nodes)
        assert all(text_order.index(node) != rank for rank, node in enumerate(nodes)), params
        exercise = item(3, "q1", params)
        right = json.loads(solution_answers(exercise)[0])
        assert right == slurm_tf_config(ch3_config.slurm_jobs(params), params["port"], _slurm_step(params)), params
        reach.forget_calls()  # this test's call, not a notebook's
        rank = nodes.index(asked)
        assert right["task"] == {"type": "worker", "index": rank - 1} and rank >= 1, params
        assert exercise.evaluate(json.dumps(right)).points == 2
        cells = exercise.rendered_cells()
        assert f"`{ch3_config.slurm_nodelist(params)}`" in cells["c03"] and f"**`{asked}`**" in cells["c03"]
        assert f'"SLURM_PROCID": str(nodes.index("{asked}"))' in cells["c05w"] and asked in exercise.hint_body(1)
        assert f'"SLURM_PROCID": "{rank}"' not in cells["c05w"]  # the hand-out's watch cell must not state the rank
        assert all(len(line) <= 120 for line in cells["ch3-q1"].splitlines()[3:]), cells["ch3-q1"]
        if number < 8:
            for name, value in _slurm_step(params).items():
                monkeypatch.setenv(name, value)
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
                jobs=ch3_config.slurm_jobs(params), port_base=params["port"], gpus_per_node=1, gpus_per_task=1,
                auto_set_gpu=False)
            theirs = {"cluster": resolver.cluster_spec().as_dict()}  # which sets the task: read it first
            theirs["task"] = dict(zip(("type", "index"), resolver.get_task_info()))
            result = exercise.evaluate(json.dumps(theirs))
            assert result.points == 0 and "text order" in result.message and f"not the task on {asked}'s" in \
                result.message, (params, str(result))


def test_ch3_q1_the_typical_mistakes_get_their_hint_on_every_draw():
    from course_utils.checkers import ch3_config

    for params in draws(ch3_config.WorkerConfig):
        exercise = item(3, "q1", params)
        right = json.loads(solution_answers(exercise)[0])
        cluster, task, port = right["cluster"], right["task"], params["port"]
        nodes, asked = ch3_config.slurm_nodes(params), f"{params['prefix']}{params['asked']}"

        def check(wrong_cluster, wrong_task, *fragments, points):
            result = exercise.evaluate(json.dumps({"cluster": wrong_cluster, "task": wrong_task}))
            assert result.points == points and all(f in result.message for f in fragments), (params, str(result))

        def found_in(wrong_cluster):  # the task a learner finds for the asked node in a wrong cluster
            return ch3_config._reference_config_of(wrong_cluster, f"{asked}:{port}")["task"]

        text_order = ch3_config._reference_slurm_cluster(params, sorted(nodes))
        longer = [n for n in sorted(nodes) if len(n) > len(nodes[0])]
        check(text_order, found_in(text_order), "text order", f"{ch3_config.listed(longer)} before {nodes[0]}",
              ch3_config.slurm_nodelist(params), points=0)
        workers_first = ch3_config._reference_slurm_cluster(params, job_order=["worker", "chief"])
        check(workers_first, found_in(workers_first), "the workers took the first ranks",
              f"points to the task on {asked} in your cluster", points=0)
        by_rank = {"chief": [f"{nodes[0]}:{port}"], "worker": [f"{n}:{port + r}" for r, n in enumerate(nodes[1:], 1)]}
        check(by_rank, task, "the ports", f"port {port} of its own node", points=1)
        check(cluster, {"type": "worker", "index": task["index"] + 1}, "counts within the 'worker' list only",
              points=1)  # the task's rank, SLURM_PROCID
        rotated = dict(cluster, worker=cluster["worker"][1:] + cluster["worker"][:1])  # moves every worker
        check(rotated, found_in(rotated), "identically ordered", points=0)
        check(cluster, {"type": "chief", "index": task["index"]}, f"'chief' is not the role of the task on {asked}",
              points=1)
        check({"worker": cluster["chief"] + cluster["worker"]}, {"type": "worker", "index": task["index"] + 1},
              "the 'chief' is missing: this job's chief is a task of its own role", points=0)
        assert nodes[0] in exercise.hint_body(2) and ch3_config.slurm_nodelist(params) in exercise.hint_body(1)


def test_ch3_q2_every_draw_is_valid_tensorflow_reads_its_solution_and_the_mistakes_get_their_hint(monkeypatch, cpus8):
    import tensorflow as tf
    from course_utils.checkers import ch3_config

    for number, params in enumerate(draws(ch3_config.ParameterServerConfig)):
        assert params != ch3_config.ParameterServerConfig.defaults and 1 <= params["asked"] < params["servers"]
        exercise = item(3, "q2", params)
        answer = solution_answers(exercise)[0]
        right, asked = json.loads(answer), ch3_config.ps_asked(params)
        assert right == ch3_config._reference_ps_config(params) and exercise.evaluate(answer).points == 2, params
        text = exercise.rendered_cells()["c06"]
        assert all(f"`{a}`" in text for addresses in right["cluster"].values() for a in addresses), text
        assert text.endswith(f"**`{asked}`**.") and "  " not in text
        if number < 8:
            monkeypatch.setenv("TF_CONFIG", answer)
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            assert (resolver.task_type, resolver.task_id) == ("ps", params["asked"]) and resolver.master() == asked
        cluster, index = right["cluster"], params["asked"]

        def check(wrong_cluster, wrong_task, *fragments, points):
            result = exercise.evaluate(json.dumps({"cluster": wrong_cluster, "task": wrong_task}))
            assert result.points == points and all(f in result.message for f in fragments), (params, str(result))

        ps_task = {"type": "ps", "index": index}
        check({k: v for k, v in cluster.items() if k != "chief"}, ps_task, "runs the ClusterCoordinator", points=1)
        check(cluster, {"type": "ps", "index": index + 1}, "count from 0", points=1)
        check(cluster, {"type": "ps", "index": 0}, f"does not point to the process on {asked}", points=1)
        check(cluster, {"type": "ps", "index": 1 + params["workers"] + index}, "counts within the 'ps' list only",
              points=1)
        check({("parameter_server" if k == "ps" else k): v for k, v in cluster.items()},
              {"type": "parameter_server", "index": index}, "the role is called 'ps'", points=0)
        check({k.upper(): v for k, v in cluster.items()}, {"type": "PS", "index": index}, "role names are lower case",
              "not 'PS'", points=0)
        check(dict(cluster, ps=cluster["ps"][:index]), ps_task, "the 'ps' list does not hold the addresses",
              points=0)


def test_ch4_q3_every_draw_is_valid_and_its_solution_scores_full_marks():
    sizes = dict(ch4.SHARD_MESH)
    for params in draws(ch4.ShardShapes):
        assert params != ch4.ShardShapes.defaults and sorted(params["layouts"]) == list("abcd")
        specs = list(params["layouts"].values())
        assert len({tuple(s) for s in specs}) == 4 and any("batch" in s and "model" in s for s in specs)
        for s in specs:
            assert all(n % sizes[a] == 0 for n, a in zip(params["shape"], s) if a != "unsharded"), params
        exercise = item(4, "q3", params)
        result = exercise.evaluate(*solution_answers(exercise))
        assert result.points == result.max_points, (params, str(result))


def test_ch4_q3_the_typical_mistakes_get_their_hint_on_every_draw():
    for params in draws(ch4.ShardShapes, 60):
        exercise = item(4, "q3", params)
        shapes, copies = solution_answers(exercise)
        sharded = next(k for k, s in params["layouts"].items() if s != ["unsharded"] * 3)
        wrong = exercise.evaluate(dict(shapes, **{sharded: tuple(params["shape"])}), copies)
        assert "that is the global shape" in wrong.message and wrong.points == 3, (params, str(wrong))
        one_axis = next(k for k, s in params["layouts"].items() if len(set(s) - {"unsharded"}) == 1)
        swapped = {"batch": 4, "model": 2}
        wrong_axis = tuple(n if a == "unsharded" else n // swapped[a]
                           for n, a in zip(params["shape"], params["layouts"][one_axis]))
        assert "wrong mesh axis" in exercise.evaluate(dict(shapes, **{one_axis: wrong_axis}), copies).message
        pieces = {k: 8 // n for k, n in copies.items()}
        assert "DIFFERENT pieces" in exercise.evaluate(shapes, pieces).message


def test_ch8_q1_every_draw_is_valid_and_its_solution_scores_full_marks():
    for params in draws(ch8.ReadSharding):
        assert params != ch8.ReadSharding.defaults and tuple(params["spec"]) not in ch8.ROSETTA_LAYOUTS
        assert len(params["shape"]) == len(params["spec"]) in (2, 3)
        assert all(n % ch8.MESH_AXES[a] == 0 for n, a in zip(params["shape"], params["spec"]) if a), params
        exercise = item(8, "q1", params)
        cells = exercise.rendered_cells()
        assert f'P({", ".join("None" if a is None else repr(a).replace(chr(39), chr(34)) for a in params["spec"])})' \
            in cells["c03"] and " × ".join(map(str, params["shape"])) in cells["c02"]
        result = exercise.evaluate(*solution_answers(exercise))
        assert result.points == result.max_points, (params, str(result))
    assert len({json.dumps(p) for p in draws(ch8.ReadSharding)}) > 60


def test_ch8_q1_the_typical_mistakes_get_their_hint_on_every_draw():
    other = {"batch": "model", "model": "batch"}
    for params in draws(ch8.ReadSharding, 80):
        exercise = item(8, "q1", params)
        keras_axes, specs, shape, copies = solution_answers(exercise)
        full, spec = tuple(params["shape"]), tuple(params["spec"])
        named = [a for a in spec if a]

        def hint(*answer):
            return exercise.evaluate(*answer)

        if None in spec:
            assert "the Python value None" in hint(tuple("None" if a is None else a for a in spec), specs, shape,
                                                   copies).message
            assert "DTensor has no None" in hint(keras_axes, [None if a == "unsharded" else a for a in specs], shape,
                                                 copies).message
        if list(reversed(spec)) != list(spec):
            assert "entry i says how array axis i is split" in hint(tuple(reversed(spec)), specs, shape,
                                                                    copies).message
        assert "that is the whole array" in hint(keras_axes, specs, full, copies).message
        swapped = tuple(n // ch8.MESH_AXES[other[a]] if a else n for n, a in zip(full, spec))
        assert "size of '" in hint(keras_axes, specs, swapped, copies).message or \
            "swapped the two mesh axes' sizes" in hint(keras_axes, specs, swapped, copies).message, params
        wrong = 8 if copies != 8 else 1
        result = hint(keras_axes, specs, shape, wrong)
        assert "not all 8 devices" in result.message or "does not split the array" in result.message, params
        assert result.points == 2
        if len(named) == 1:
            assert "DIFFERENT pieces" in hint(keras_axes, specs, shape, ch8.MESH_AXES[named[0]]).message, params


def test_ch4_q4_every_order_is_valid_its_solution_scores_full_marks_and_the_aimed_hints_follow_the_case():
    assert len({params["order"] for params in draws(ch4.WhichCollective, 1000)}) == 120  # every order comes up
    orders = {"".join(p) for p in itertools.permutations("abcde")} - {"abcde"}  # student_variant redraws this one
    truth = {case: answer for case, (answer, _) in ch4._reference_collectives().items()}
    for order in orders:
        exercise = item(4, "q4", {"order": order})
        right = solution_answers(exercise)[0]
        assert {letter: truth[case] for letter, case in zip("abcde", order)} == right
        result = exercise.evaluate(right)
        assert result.points == result.max_points, (order, str(result))
        d, e = "abcde"[order.index("d")], "abcde"[order.index("e")]
        assert f"In case {d}, DTensor" in exercise.hint_body(3) and f"In case {e}, 'batch'" in exercise.hint_body(3)
        assert f"Case **{d}** splits" in exercise.rendered_cells()["c14"]
        other_plan = exercise.evaluate(dict(right, **{d: ("all-gather", "model")}))
        assert "gathering w whole along k is a plan" in other_plan.message and other_plan.points == 4
        kind = exercise.evaluate(dict(right, **{e: ("all-reduce", "batch")}))
        assert "could they finish the sums" in kind.message, (order, str(kind))
        nothing = exercise.evaluate(dict(right, **{d: "none"}))
        assert "cannot finish alone" in nothing.message


def test_ch4_q5_every_draw_is_valid_and_its_solution_scores_full_marks():
    for params in draws(ch4.LayoutCost):
        assert params != ch4.LayoutCost.defaults and (params["batch"], params["model"]) != (4, 2)
        assert params["examples"] % params["batch"] == 0
        truth = ch4._reference_layout_costs(params)
        assert truth["even_at"] == (params["batch"] - 1) * params["features"] != params["examples"]
        exercise = item(4, "q5", params)
        result = exercise.evaluate(*solution_answers(exercise))
        assert result.points == result.max_points, (params, str(result))


def test_ch4_q5_the_typical_mistakes_get_their_hint_on_every_draw():
    for params in draws(ch4.LayoutCost, 60):
        exercise = item(4, "q5", params)
        truth = ch4._reference_layout_costs(params)
        recognised = 0
        for key, slips in ch4._reference_cost_slips(params).items():
            seen = {truth[key]} | ({truth[key] // 4} if key in ch4.COST_BYTES else set())
            for value, why, _ in slips:
                if value in seen:
                    continue  # the right answer, an earlier slip of the same value (whose hint it gets), or elements
                seen.add(value)
                result = exercise.evaluate(dict(truth, **{key: value}))
                assert result.points == 4 and why in result.message, (params, key, value, str(result))
                recognised += 1
        assert recognised >= 8, params
        elements = exercise.evaluate(dict(truth, b_held=truth["b_held"] // 4))
        assert "counts the float32 numbers" in elements.message


def test_ch7_q2_every_draw_is_valid_scores_its_solution_and_the_mistakes_get_their_hint():
    from course_utils.checkers import ch7_lookup

    seen_keys = set()
    for params in draws(ch7_lookup.LayoutMapRules, 400):
        model, layer, keys = params["model"], params["layer"], params["keys"]
        assert params != ch7_lookup.LayoutMapRules.defaults and len(set(keys)) == 2, params
        assert {key.replace(model, "{m}").replace(layer, "{l}") for key in keys} <= set(ch7_lookup.KEY_POOL), params
        seen_keys.add(tuple(keys))
        exercise = item(7, "q2", params)
        right = solution_answers(exercise)[0]
        paths = {part: f"{model}/{layer}/{part}" for part in ("kernel", "bias")}
        for key, answer in right.items():  # what each rule's function finds, counted here again
            part, rule = key.split(", ")
            matched = [k for k in keys if {"tf_keras": re.match, "keras_3_13": re.search,
                                           "keras_3_15": re.fullmatch}[rule](k, paths[part])]
            assert answer == ("replicated" if not matched else matched[0] if rule == "tf_keras" or len(matched) == 1
                              else "ValueError"), (params, key)
        columns = {rule: (right[f"kernel, {rule}"], right[f"bias, {rule}"]) for rule in ch7_lookup.RULES}
        assert len(set(columns.values())) >= 2 and len(set(right.values())) >= 3, params
        assert exercise.evaluate(right).points == 6
        cells = exercise.rendered_cells()
        assert f'`"{keys[0]}"`, then `"{keys[1]}"`' in cells["c05"] and f"`{paths['kernel']}`" in cells["c05"]
        assert f'for key in ("{keys[0]}", "{keys[1]}")' in cells["c06a"] and paths["bias"] in cells["c06a"]
        for key, answer in right.items():  # another rule's answer, or another outcome: the rule's function and path
            part, rule = key.split(", ")
            for wrong in {*right.values(), *keys, "replicated", "ValueError"} - {answer}:
                result = exercise.evaluate(dict(right, **{key: wrong}))
                assert result.points == 5 and f"apply re.{ch7_lookup.RULES[rule].__name__} to each key and the path " \
                    f"{paths[part]!r}" in result.message, (params, key, wrong, str(result))
            own = (ch7_lookup.RULES[rule], rule == "tf_keras")  # a mixed-up rule: another function, or the other policy
            for other, first_wins in [(own[0], not own[1]),
                                      *((m, own[1]) for m in ch7_lookup.RULES.values() if m != own[0])]:
                given = ch7_lookup._reference_lookup_as(other, first_wins, paths[part], keys)
                if given != answer:
                    message = exercise._evaluate((dict(right, **{key: given}),), {}, first_try=True).message
                    assert "That is what" in message or "does not raise" in message, (params, key, given, message)
        assert f"Both paths start with '{model}/'" in exercise.hint_body(1)
    assert len(seen_keys) > 300


def test_ch7_q2_both_layout_maps_find_what_the_solution_says_on_many_draws(mesh42, keras2):
    """tf_keras' own LayoutMap (re.match, the first key inserted wins) and this Keras 3's on 40 draws."""
    from tensorflow.experimental import dtensor
    from course_utils.checkers import ch7_lookup

    U = dtensor.UNSHARDED
    layouts = [dtensor.Layout([U, "model"], mesh42), dtensor.Layout(["model", U], mesh42)]
    for params in draws(ch7_lookup.LayoutMapRules, 40):
        right = solution_answers(item(7, "q2", params))[0]
        layout_map = keras2.dtensor.experimental.LayoutMap(mesh42)
        for key, layout in zip(params["keys"], layouts):
            layout_map[key] = layout
        for part in ("kernel", "bias"):
            found = layout_map[f"{params['model']}/{params['layer']}/{part}"]
            name = "replicated" if found is None else params["keys"][layouts.index(found)]
            assert name == right[f"{part}, tf_keras"], params
    import keras
    from keras import distribution as kd

    if keras.__version__.startswith("3.15"):  # Keras 3.15's rule, re.fullmatch (test_ch7 reads it too)
        mesh = kd.DeviceMesh((4, 2), ("batch", "model"), devices=kd.list_devices()[:8])
        for params in draws(ch7_lookup.LayoutMapRules, 40):
            right = solution_answers(item(7, "q2", params))[0]
            keras_map = kd.LayoutMap(mesh)
            keras_map[params["keys"][0]], keras_map[params["keys"][1]] = (None, "model"), ("model", None)
            for part in ("kernel", "bias"):
                try:
                    found = keras_map[f"{params['model']}/{params['layer']}/{part}"]
                    name = "replicated" if found is None else \
                        params["keys"][0 if tuple(found.axes) == (None, "model") else 1]
                except ValueError:
                    name = "ValueError"
                assert name == right[f"{part}, keras_3_15"], params
    exact = keras2.dtensor.experimental.LayoutMap(mesh42)  # why KEY_POOL has no whole path: an exact key comes first
    exact[".*dense_1/kernel"], exact["mlp/dense_1/kernel"] = layouts
    assert exact["mlp/dense_1/kernel"] == layouts[1]
def test_ch5_q5_every_draw_is_valid_and_its_solution_scores_full_marks():
    mib = 2**20
    for params in draws(ch5_budget.MemoryBudget):
        assert params != ch5_budget.MemoryBudget.defaults
        batch, model = params["batch"], params["model"]
        assert batch * model > 8 and 784 % batch == 0 and params["examples"] % batch == 0
        held = ch5_budget._reference_budget_memory(params)
        assert (held["outputs split"] is None) == (10 % model != 0)
        assert params["hidden"] % model == 0 and None not in (held["tensor parallel"], held["2-D"])
        fits = {budget: [name for name, total in held.items() if total is not None and total <= params[budget] * mib]
                for budget in ("roomy", "tight")}
        choice = ch5_budget._reference_budget_choice(params)
        assert len(fits["tight"]) == 1 and choice["tight"] == fits["tight"][0] != choice["roomy"], params
        assert len(fits["roomy"]) >= 2 and choice["roomy"] != min(fits["roomy"], key=held.get), params
        exercise = item(5, "q5", params)
        result = exercise.evaluate(*solution_answers(exercise))
        assert result.points == result.max_points, (params, str(result))
    assert {p["model"] for p in draws(ch5_budget.MemoryBudget)} == {2, 4, 8}  # outputs split can be placed, or not


def test_ch5_q5_the_typical_mistakes_get_their_hint_on_every_draw():
    for params in draws(ch5_budget.MemoryBudget, 60):
        exercise = item(5, "q5", params)
        memory, choice = solution_answers(exercise)
        slips = exercise._grade_slips()
        name = "FSDP-style"  # every mesh can hold it

        def told(answer, *fragments, picks=choice, points=5):
            result = exercise.evaluate(dict(memory, **{name: answer}) if answer is not None else memory, picks)
            assert result.points == points and all(f in result.message for f in fragments), (params, str(result))

        told(slips["adam"][name], "counts two slots per weight")
        told(slips["weights"][name], "that is the weights alone")
        told(memory[name] + 8, "8-byte step counter")
        told(memory[name] // 4, "counts float32 numbers")
        if params["batch"] != 4:
            told(slips["chapter mesh"][name], "divides by the chapter's axis sizes")
        if 10 % params["model"]:
            name = "outputs split"
            told(12345, "this mesh cannot hold outputs split at all")
            told(slips["uneven"][name], "the remainder of an uneven split dropped")
        else:
            name = "outputs split"
            told("cannot", "this mesh can hold outputs split")
        held = ch5_budget._reference_budget_memory(params)
        fitting = [n for n, total in held.items() if total is not None and total <= params["roomy"] * 2**20]
        least = min(fitting, key=held.get)
        told(None, "roomy: " + least + " fits and holds the least, but", picks=dict(choice, roomy=least))
        over = next(n for n, total in held.items() if total is not None and total > params["tight"] * 2**20)
        told(None, f"tight: {over} holds more than {params['tight'] * 2**20:,} bytes", picks=dict(choice, tight=over))
        if 10 % params["model"]:
            told(None, "cannot be placed on this mesh", picks=dict(choice, tight="outputs split"))
        told(None, "choice: " + choice["roomy"] + " under the roomy budget", picks={
            f"{params['roomy']} MiB": choice["roomy"], f"{params['tight']}": choice["tight"]}, points=6)
        assert f"('batch' {params['batch']}, 'model' {params['model']})" in exercise.hint_body(2)


def test_ch5_q5_the_cell_before_the_answer_prints_what_each_placement_of_the_variant_sends(capsys):
    for params in draws(ch5_budget.MemoryBudget, 6):
        code = item(5, "q5", params).rendered_cells()["c15b"]
        exec(code, {})  # noqa: S102 - the course's own cell
        printed = capsys.readouterr().out
        sent = ch5_budget.budget_bytes_sent(ch5_budget._budget_mesh(params), params["hidden"], params["examples"])
        for name, total in sent.items():
            assert re.search(re.escape(name) + rf" +{total:,} ", printed), (params, printed)
        assert ("tensor parallel" in printed) == (params["hidden"] % params["model"] == 0)


def test_ch7_q4_every_draw_is_valid_and_its_solution_scores_full_marks():
    from course_utils.checkers import ch7_bubble

    chapter_cases = {*ch7_bubble.CHAPTER_PIPELINES, (ch7_bubble.STAGES, ch7_bubble.MICRO_BATCHES)}
    bubble = ch7_bubble._reference_bubble
    for params in draws(ch7_bubble.PipelineBubble):
        d, m, wide, percent = params["stages"], params["micro_batches"], params["wide_stages"], params["idle_percent"]
        assert (d, m) not in chapter_cases and (wide, percent) != (8, 10) and wide != d, params
        fewest = ch7_bubble._reference_fewest_micro_batches(wide, percent)
        assert bubble(wide, fewest) <= percent / 100 < bubble(wide, fewest - 1), params
        exercise = item(7, "q4", params)
        speedup, micro_batches = solution_answers(exercise)
        assert micro_batches == fewest and abs(speedup - d * m / (m + d - 1)) < 1e-12
        result = exercise.evaluate(speedup, micro_batches)
        assert result.points == 2, (params, str(result))
        assert f"**{wide}** stages" in exercise.rendered_cells()["c09"] and f"<= {percent / 100:g} for m" in \
            exercise.hint_body(2)


def test_ch7_q4_the_typical_mistakes_get_their_hint_on_every_draw():
    """Every pipeline a draw can give (there are few): each typical wrong speed-up gets its own hint."""
    from course_utils.checkers import ch7_bubble

    pipelines = {(p["stages"], p["micro_batches"]) for p in draws(ch7_bubble.PipelineBubble, 2000)}
    parts = {(p["wide_stages"], p["idle_percent"]) for p in draws(ch7_bubble.PipelineBubble, 2000)}
    assert pipelines == set(itertools.product(ch7_bubble.BUBBLE_STAGES, ch7_bubble.BUBBLE_MICRO_BATCHES)) - {
        *ch7_bubble.CHAPTER_PIPELINES, (4, 12)}  # every one comes up
    for (d, m), (wide, percent) in zip(sorted(pipelines), itertools.cycle(sorted(parts))):
        exercise = item(7, "q4", {"stages": d, "micro_batches": m, "wide_stages": wide, "idle_percent": percent})
        right, bubble = d * m / (m + d - 1), (d - 1) / (m + d - 1)
        fewest = ch7_bubble._reference_fewest_micro_batches(wide, percent)
        for wrong, why in ((d, "no bubble"), (1 / right, "FASTER"), (1 - bubble, "a share of the step"),
                           (bubble, "a share of the step"), (d * m / (m + d), "one slot too long"),
                           (right + 0.37, "count the slots")):
            result = exercise.evaluate(wrong, fewest)
            assert result.points == 1 and why in result.message, (d, m, wrong, str(result))
        short = exercise.evaluate(right, fewest - 1)
        idle = ch7_bubble.idle_text(bubble_of := ch7_bubble._reference_bubble(wide, fewest - 1), percent)
        assert f"idles {idle} of the step" in short.message and f"more than {percent}%" in short.message, str(short)
        assert float(idle[:-1]) > percent and bubble_of > percent / 100
        assert "fewer would too" in exercise.evaluate(right, fewest + 1).message


def test_ch9_q3_every_draw_is_valid_scores_its_solution_and_the_mistakes_get_their_hint():
    from course_utils.checkers import ch9

    seen = set()
    for params in draws(ch9.WhoReadsWhat, 400):
        workers = params["workers"]
        counts = [params[case] for case in ch9.SHARDING_CASES]
        assert params != ch9.WhoReadsWhat.defaults and 2 <= workers <= 6, params
        assert all(1 <= n < 2 * workers for n in counts) and params["few_files"] < params["many_files"], params
        exercise = item(9, "q3", params)
        right = solution_answers(exercise)[0]
        assert right == {case: "error" if params[case] < workers else "by element" if case == "whole_files" else
                         "by file" for case in ch9.SHARDING_CASES}, params
        seen.add(tuple(right.values()))
        assert exercise.evaluate(right).points == 4 and exercise.evaluate(ch9._reference_readings()).points < 4
        cells = exercise.rendered_cells()
        assert f"`input_ops.auto_shard_dataset(dataset, {workers}, worker, {workers})`" in cells["c10"]
        assert f"every {ch9._nth(workers)} element" in cells["c10"] and "{{" not in "".join(cells.values())
        assert "**predict first**: the check\ncounts only while this notebook has not imported or used `input_ops`" \
            in cells["c10"] and exercise.revealed_by == ch9.READINGS_TOOLS  # every variant names the tool
        # the learner's review: a variant's keys may belie their names ("many_files" with too few files), so it says
        # that they only name the cases; a whole_files with too few elements is told of the DATA shard's check (the
        # chapter read only the FILE one), and not the answer, on the first try
        assert "The keys only name the cases: the table's code says how many files each one reads." in cells["c10"]
        if right["whole_files"] == "error":
            first = exercise._evaluate((dict(right, whole_files="by element"),), {}, first_try=True).message
            assert "the same check as the FILE one the chapter read in the source" in first, first
            assert "It is 'error'" not in first and "fails" not in first, first
        for case in ch9.SHARDING_CASES:  # the table's pipeline is the one the watch cell runs
            code = exercise.text_values()[f"{case}_code"]
            assert f"| `\"{case}\"` | `{code}`: " in cells["c10"]
            assert re.sub(r"\s+", "", code.replace("tf.io.read_file", "read_whole")) in re.sub(r"\s+", "", cells["c14"])
        why, answers = ch9._reference_reading_why(params), ch9._reference_reading_answers(params)
        assert {(c, g) for c in ch9.SHARDING_CASES for g in ch9.READINGS if g != right[c]} == set(why)
        for (case, given), text in why.items():
            result = exercise.evaluate(dict(right, **{case: given}))
            assert result.points == 3 and text in result.message and answers[case] in result.message, (params, case)
        menu = ch9._readings_menu(workers)
        assert all(ch9._normalize_reading(menu[reading], workers) == reading for reading in menu)
        assert exercise.evaluate(dict(right, **{case: menu[right[case]] for case in right})).points == 4
    assert len(seen) == 11 and tuple(ch9._reference_readings().values()) not in seen  # every set of answers but the
    # defaults' and those where "many_files" fails and "few_files" does not


@pytest.mark.parametrize("params", [
    {"workers": 5, "many_files": 2, "few_files": 1, "interleaved": 8, "whole_files": 3},
    {"workers": 3, "many_files": 5, "few_files": 2, "interleaved": 2, "whole_files": 4}])
def test_ch9_q3_the_watch_cell_shows_what_the_solution_says(params, capsys):
    """The variant's "watch it" cell, run: the workers that fail, read nothing, or read their own files."""
    import tempfile

    import tensorflow as tf

    exercise = item(9, "q3", params)
    readings = solution_answers(exercise)[0]
    shown = type("Shown", (), {"answer_shown": staticmethod(lambda: True)})
    namespace = {"tf": tf, "ex": type("Ex", (), {"q3": shown}), "readings": readings, "tempfile": tempfile}
    exec(exercise.rendered_cells()["c14"], namespace)  # noqa: S102 - the course's own cell (it imports input_ops)
    printed = capsys.readouterr().out
    workers = params["workers"]
    for case in ch9_cases():
        block = printed.split(f"{case} (you said {readings[case]!r}):\n", 1)[1]
        lines = [line.strip() for line in block.splitlines()[:workers]]
        n = params[case]
        if readings[case] == "error":
            assert all("InvalidArgumentError: Could not apply FILE based sharding" in line for line in lines[:n])
            assert lines[n:] == [f"worker {w}: []" for w in range(n, workers)], lines
        else:
            for worker, line in enumerate(lines):
                assert all(f"f{i}" in line for i in range(worker, n, workers)) and line.count("'f") == \
                    (2 if case != "whole_files" else 1) * len(range(worker, n, workers)), (case, line)
    whole = params["whole_files"]
    for worker in range(workers):
        kept = len(range(worker, whole, workers)) if whole >= workers else \
            "none (InvalidArgumentError)" if worker < whole else 0
        assert f"whole_files: worker {worker} read {whole if whole >= workers else ''}" in printed
        assert re.search(rf"whole_files: worker {worker} read \d+ files and kept {re.escape(str(kept))}\n", printed)


def ch9_cases():
    from course_utils.checkers import ch9

    return ch9.SHARDING_CASES


def test_ch12_q1_every_draw_is_valid_scores_its_solution_and_gets_the_aimed_hints():
    from course_utils.checkers import ch12

    seen = set()
    for params in draws(ch12.WhatThreeWorkersDeliver):
        workers, trainers = params["workers"], params["trainers"]
        assert workers != trainers and (workers, trainers) != (3, 2), params
        seen.add((workers, trainers))
        exercise = item(12, "q1", params)
        right = solution_answers(exercise)[0]
        assert right == dict(zip(ch12.CASES, (workers * trainers, workers, trainers, 1)))
        assert exercise.evaluate(right).points == 3 and exercise.title.startswith(f"What {ch12.NUMBER_WORDS[workers]}")
        assert f"**{workers} workers** and feeds **{trainers} trainers**" in exercise.rendered_cells()["e02"] or \
            trainers == 2
        chapter = exercise.evaluate(dict(ch12.CHAPTER_COUNTS))
        assert chapter.points < 3 and f"here there are {workers} workers and {trainers} trainers" in chapter.message
        swapped = exercise.evaluate(dict(zip(ch12.CASES, (workers * trainers, trainers, workers, 1))))
        assert swapped.points == 1 and "multiplied by the trainers where the service workers count" in swapped.message
    assert len(seen) == 41  # every variant comes up


@pytest.mark.parametrize("workers, trainers", [(2, 3), (4, 3)])
def test_ch12_q1_the_watch_cell_measures_what_the_solution_says(workers, trainers, capsys):
    """The variant's "watch it" cell, run on a real tf.data service, counts the deliveries its solution states."""
    import tensorflow as tf

    exercise = item(12, "q1", {"workers": workers, "trainers": trainers})
    deliveries = solution_answers(exercise)[0]
    shown = type("Shown", (), {"answer_shown": staticmethod(lambda: True)})
    namespace = {"tf": tf, "ex": type("Ex", (), {"q1": shown}), "deliveries": deliveries}
    exec(exercise.rendered_cells()["e05"], namespace)  # noqa: S102 - the course's own cell
    printed = capsys.readouterr().out
    for case, times in deliveries.items():
        assert re.search(re.escape(case) + rf" +each of the 60 examples delivered \[{times}\] time", printed), printed


def test_hints_state_the_variants_numbers_and_the_grader_serves_them():
    params = next(p for p in draws(ch4.LayoutCost) if p["features"] != 4096)
    exercise = item(4, "q5", params, GRADED)
    assert f"by {params['features']} features" in exercise.hint_body(3)
    assert "{{" not in "".join(exercise.hints[:]) and exercise.hints_seen == 3
    logged = []
    assert serve_hint("course-hint 4.q5 3", {"q5": exercise}, logged.append) == exercise.hint_body(3)
    assert logged == [{"hint": "q5", "level": 3}]


def test_the_sandbox_copy_has_no_reference_values_nor_hint_texts():
    import course_utils.checkers.ch4 as module
    from pathlib import Path

    stripped = strip_checker_source(Path(module.__file__).read_text())
    assert "def reference_values" not in stripped and "def draw" not in stripped and "def text_values" in stripped
    assert re.search(r"hints = \((\s*'" + re.escape(HIDDEN_HINT) + r"',?)+\s*\)", stripped)
