"""Chapter 7 · exercise 4: what the bubble of a GPipe-style schedule costs (the speed-up of a pipeline, and the fewest
micro-batches that keep the idle share under a bound), its numbers varying per student.

The answers are numbers; ``grade`` compares them with the slot count of the schedule and aims its hints at the
typical slips (no bubble, the inverse, a share instead of a speed-up, one slot too many).
"""
from .answers import as_int, as_number
from . import ch7_texts
from .core import Exercise, Feedback

# Exercise 4: what the bubble costs a GPipe-style schedule. It varies per student (:mod:`.variants`): the pipeline of
# the first part (its stages and micro-batches) and the second part's stages and most idle share.
STAGES, MICRO_BATCHES = 4, 12  # the pipeline of the first part
WIDE_STAGES, MOST_IDLE_PERCENT = 8, 10  # the second part: 8 stages, each device idle at most 10 % of a step
CHAPTER_PIPELINES = ((4, 4), (4, 16), (4, 64))  # (stages, micro-batches) the chapter's bubble() printed
BUBBLE_STAGES = (2, 3, 4, 5, 6, 8)  # a drawn pipeline's stages
BUBBLE_MICRO_BATCHES = (6, 8, 10, 12, 16, 20, 24, 32)  # and its micro-batches
BUBBLE_WIDE_STAGES = (6, 8, 10, 12, 16)  # the second part's stages
BUBBLE_IDLE_PERCENTS = (5, 10, 20, 25)  # and the most each device may idle, in percent
UNIT_SHARES = {2: "a half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth", 7: "a seventh", 8: "an eighth",
               9: "a ninth", 10: "a tenth"}  # how the solution's comment names a bubble of 1/n


def _reference_bubble(stages, micro_batches):
    """The share of a step each device idles in a GPipe-style schedule: (d - 1) / (m + d - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def _reference_speedup(stages, micro_batches):
    """How many times faster a step runs on ``stages`` pipelined devices than on one device holding every stage:
    one device takes m * d slots of one stage's work on one micro-batch, the pipeline m + d - 1."""
    return stages * micro_batches / (micro_batches + stages - 1)


def _reference_fewest_micro_batches(stages, at_most_percent):
    """The fewest micro-batches that keep the bubble of ``stages`` stages at most ``at_most_percent`` % (in whole
    numbers: (d - 1) * 100 <= p * (m + d - 1), so that no float rounding decides)."""
    m = 1
    while (stages - 1) * 100 > at_most_percent * (m + stages - 1):
        m += 1
    return m


def _times(raw):
    """A number from an answer such as 3.2, '3.2', '3.2x', '3.2 ×' or '320%' (see as_number); else None."""
    if isinstance(raw, str):
        raw = raw.strip().rstrip("x×X").strip()
    return as_number(raw, percent=True)


def idle_text(share, than_percent):
    """``share`` as a percentage with enough decimals to show it is above ``than_percent``: 7/69 -> '10.1%'.

    Example:
        >>> idle_text(7 / 69, 10), idle_text(15 / 299, 5)
        ('10.1%', '5.02%')
    """
    for digits in (1, 2, 3, 4):
        text = f"{share:.{digits}%}"
        if float(text[:-1]) > than_percent:
            return text
    return text


class PipelineBubble(Exercise):
    title = "What the pipeline bubble costs"
    points = 2
    defaults = {"stages": STAGES, "micro_batches": MICRO_BATCHES, "wide_stages": WIDE_STAGES,
                "idle_percent": MOST_IDLE_PERCENT}
    templates = {"c09": ch7_texts.BUBBLE_QUESTION, "ch7-q4": ch7_texts.BUBBLE_SOLUTION}
    hints = (
        "Time a step in slots: one slot is one stage's forward (or backward) work on one micro-batch. The forward "
        "pass sweeps the micro-batches through the stages, then the backward pass sweeps them back: how many slots "
        "does each sweep take until the last micro-batch is through? And on one device that runs every stage?",
        "Each sweep of the pipeline takes m + d - 1 slots (d - 1 to fill it), on one device m * d: the speed-up is "
        "m * d / (m + d - 1) = d * (1 - bubble). For the second part, solve (d - 1) / (m + d - 1) <= {{idle_share}} "
        "for m and take the smallest whole number.",
    )

    @staticmethod
    def draw(rng):
        """A pipeline (stages, micro-batches) other than the exercise's 4 x 12 and the chapter's, and a second part
        (stages, idle percent) other than 8 stages at 10 %, with other stages than the first part's."""
        stages, micro_batches = rng.choice([(d, m) for d in BUBBLE_STAGES for m in BUBBLE_MICRO_BATCHES
                                            if (d, m) not in (*CHAPTER_PIPELINES, (STAGES, MICRO_BATCHES))])
        wide_stages, idle_percent = rng.choice([(d, p) for d in BUBBLE_WIDE_STAGES for p in BUBBLE_IDLE_PERCENTS
                                                if (d, p) != (WIDE_STAGES, MOST_IDLE_PERCENT) and d != stages])
        return {"stages": stages, "micro_batches": micro_batches, "wide_stages": wide_stages,
                "idle_percent": idle_percent}

    def text_values(self):
        return {**self.params, "idle_share": f"{self.params['idle_percent'] / 100:g}"}

    def reference_values(self):
        from fractions import Fraction

        d, m = self.params["stages"], self.params["micro_batches"]
        line = f"speedup = ({m} * {d}) / ({m} + {d} - 1)"
        bubble = Fraction(d - 1, m + d - 1)
        return {"filling": d - 1, "speedup_line": line.ljust(65), "speedup": f"{_reference_speedup(d, m):.4g}",
                "bubble": UNIT_SHARES.get(bubble.denominator, str(bubble)) if bubble.numerator == 1 else str(bubble),
                "fewest": _reference_fewest_micro_batches(self.params["wide_stages"], self.params["idle_percent"])}

    def grade(self, speedup, micro_batches):
        fb = Feedback()
        speedup_ok = self._grade_speedup(fb, speedup, _times(speedup))
        wide, percent = self.params["wide_stages"], self.params["idle_percent"]
        given_m, right_m = as_int(micro_batches), _reference_fewest_micro_batches(wide, percent)
        if given_m == right_m:
            fb.right(f"fewest micro-batches for at most {percent}% idle with {wide} stages")
        elif given_m is None:
            fb.wrong(f"micro_batches: give a whole number of micro-batches, got {micro_batches!r}.")
        elif given_m > right_m:
            fb.wrong("micro_batches: that works, but fewer would too: find the smallest.")
        elif given_m > 0:  # the idle share of the learner's m only once the slots are counted right
            idle = f" each device idles {idle_text(_reference_bubble(wide, given_m), percent)} of the step," \
                if speedup_ok else ""
            fb.wrong(f"micro_batches: with {given_m} and {wide} stages,{idle} more than {percent}% of the "
                     f"step is idle: find the smallest whole number of micro-batches that keeps the bubble at most "
                     f"{percent}%.",
                     answer=f"({wide} - 1) / (m + {wide} - 1) <= {percent / 100:g}: micro_batches = {right_m}")
        else:
            fb.wrong(f"micro_batches: give a positive number of micro-batches, got {micro_batches!r}.")
        return fb

    def _grade_speedup(self, fb, raw, given):
        stages, micro_batches = self.params["stages"], self.params["micro_batches"]
        right = _reference_speedup(stages, micro_batches)
        answer = (f"One device: {micro_batches} x {stages} = {micro_batches * stages} slots; the pipeline: "
                  f"{micro_batches} + {stages} - 1 = {micro_batches + stages - 1} slots; speedup = {right:g}")
        def near(value):
            return given is not None and abs(given - value) < 1e-3 * max(1.0, abs(value))
        if near(right):
            fb.right(f"speed-up of {stages} pipelined stages with {micro_batches} micro-batches")
            return True
        if given is None:
            fb.wrong(f"speedup: give a number (how many times faster), got {raw!r}.")
        elif near(stages):
            fb.wrong("speedup: that is the speed-up of a pipeline with no bubble. While the pipeline fills and "
                     "drains, some devices have nothing to do: how many slots does the whole step take?",
                     answer=answer)
        elif near(1 / right):
            fb.wrong("speedup: that is the pipeline's time as a share of one device's: the question asks how many "
                     "times FASTER the pipeline is (a number above 1).", answer=answer)
        elif near(1 - _reference_bubble(stages, micro_batches)) or near(_reference_bubble(stages, micro_batches)):
            fb.wrong("speedup: that is a share of the step (the time each device works, or idles), not a speed-up. "
                     "Compare the step's time on one device with its time on the pipeline.", answer=answer)
        elif near(stages * micro_batches / (micro_batches + stages)):
            fb.wrong("speedup: your pipeline step is one slot too long. The last stage gets the first micro-batch "
                     "after how many slots of filling?", answer=answer)
        else:
            fb.wrong("speedup: count the slots of one step on the pipeline (the micro-batches, plus those it takes "
                     "to fill) and on one device (every stage of every micro-batch), and divide.", answer=answer)
        return False
