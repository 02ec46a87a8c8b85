from course_utils.environment import Check, check_environment


def test_report_names_every_item():
    names = [c.name for c in check_environment()]
    assert names[:2] == ["Python", "TensorFlow"] and "MNIST" in names and "devices" in names


def test_fix_lines_say_what_to_do():
    assert str(Check("MNIST", False, "not found", "Set TFDS_DATA_DIR")) == "[FIX] MNIST: not found\n      -> Set TFDS_DATA_DIR"
    assert str(Check("where", True, "local Jupyter")) == "[ok] where: local Jupyter"
