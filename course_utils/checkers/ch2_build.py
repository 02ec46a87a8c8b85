"""Chapter 2 · the build-and-measure exercise: a distributed training step whose loss scaling the
learner writes (exercise 4).

``collect`` runs the learner's ``make_train_step`` on the checker's strategy, model and two batches drawn from the
check's seed (``ch2_step_run.py``) and sends what it returned and every variable's copies after the step; ``judge``
compares them with one SGD step on one device with the whole batch and explains what differs
(``ch2_step_diagnosis.py``; an error the step raised, ``ch2_step_errors.py``)."""

from .core import Exercise, Feedback
from .ch2_step_errors import _last_error
from .ch2_step_run import STEP_REPLICAS, _run_train_step, _step_batches, _step_data, _StepAnswerError


class DistributedStep(Exercise):
    title = "A distributed step right for every batch"
    points = 4
    hints = (
        "Under strategy.run the replicas' gradients are SUMMED. What must each replica divide its summed loss by, so "
        "that the sum is the gradient of the batch's mean loss, when the last batch is smaller and its replicas do "
        "not get equal shares?",
        "In replica_step(features, labels): a GradientTape around the forward pass, per-example losses "
        "(reduction=NONE), their sum divided by the number of examples of the WHOLE step, apply_gradients. In a "
        "tf.function train_step: strategy.run(replica_step, ...) and strategy.reduce(SUM, losses, axis=None). The "
        "whole step's count is the sum of the replicas' batch sizes: add up tf.shape(y)[0] of "
        "strategy.experimental_local_results(labels) before strategy.run (and pass it in args), or all-reduce "
        "tf.shape(labels)[0] inside replica_step.",
        "Inside replica_step: examples = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, "
        "tf.shape(labels)[0]); loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples).",
    )

    def collect(self, make_train_step, seed=0):
        """Runs ``make_train_step`` on the checker's strategy, model and optimizer, then its train_step on the two
        batches drawn from ``seed``. What crosses, one of: {"not callable": type name}; {"problem": what is wrong,
        in the checker's words}; {"raised": one line about the error train_step raised, "text": the error's text
        (cut)}; {"records": per batch, {"returned": what train_step returned (see _returned_as_data), "copies":
        per variable, its value on each replica after the step}}."""
        if not callable(make_train_step):
            return {"not callable": type(make_train_step).__name__}
        try:
            return {"records": _run_train_step(make_train_step, seed)}
        except _StepAnswerError as err:
            return {"problem": str(err)}
        except Exception as err:
            text = str(err)
            return {"raised": _last_error(err), "text": text if len(text) <= 12_000 else text[:6000] + text[-6000:]}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect`: each batch's variables against one SGD step on one device with the
        whole batch of ``seed``, and what train_step returned against that batch's mean loss."""
        # imported here: the graded sandbox's copies of these modules have no _judge, _grade or _reference functions
        from .ch2_step_diagnosis import _diagnose_change, _fixed_divisor, _grade_returned_loss, _judge_explain_change
        from .ch2_step_errors import _judge_step_error_answer, _step_error_hint

        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"make_train_step should be a function (strategy, model, optimizer) -> train_step, got "
                     f"{data['not callable']}.")
            return fb
        if "problem" in data:
            fb.wrong(str(data["problem"]))
            return fb
        if "raised" in data:
            text = str(data["text"])
            fb.wrong(f"train_step raised {data['raised']}" + _step_error_hint(text), answer=_judge_step_error_answer(text))
            return fb
        records = self._judge_records(data["records"], seed)
        replicas = STEP_REPLICAS
        diagnoses = [_diagnose_change(r) for r in records]
        fixed = _fixed_divisor(diagnoses, records)
        for index, (diagnosis, record, points) in enumerate(zip(diagnoses, records, (2, 1))):
            if diagnosis == ("right",):
                what = "the full batch" if index == 0 else "the last batch"
                fb.right(f"{what} of {sum(record['sizes'])} examples (split {', '.join(map(str, record['sizes']))} "
                         f"over {replicas} replicas): every variable changed as in one SGD step on one device with "
                         f"the whole batch", points=points)
            else:
                _judge_explain_change(fb, diagnosis, record, replicas, fixed, None if index == 0 else diagnoses[0])
        _grade_returned_loss(fb, records, replicas)
        return fb

    @staticmethod
    def _judge_records(collected, seed):
        """The collected records, checked for shape, with the sizes, starting weights and what one device expects
        for the batches of ``seed``. Raises ValueError on records of another shape."""
        import numpy as np

        from .ch2_step_run import _reference_step_expected  # here: the graded sandbox's copy has no _reference ones

        x, y, start = _step_data(seed)
        batches = _step_batches(x, y)
        if type(collected) is not list or len(collected) != len(batches):
            raise ValueError(f"{len(batches)} batch records expected")
        records = []
        for record, parts in zip(collected, batches):
            copies = record["copies"]
            if type(copies) is not list or len(copies) != len(start):
                raise ValueError(f"{len(start)} variables expected")
            checked = []
            for variable, value in zip(copies, start):
                if type(variable) is not list or len(variable) != STEP_REPLICAS:
                    raise ValueError(f"{STEP_REPLICAS} copies of each variable expected")
                arrays = [np.asarray(c, dtype="float64") for c in variable]
                if any(a.shape != value.shape for a in arrays):
                    raise ValueError("a variable's copy has another shape than the variable")
                checked.append(arrays)
            records.append({"sizes": [len(py) for _, py in parts], "returned": record["returned"], "copies": checked,
                            "start": start, **_reference_step_expected(start, parts)})
        return records

