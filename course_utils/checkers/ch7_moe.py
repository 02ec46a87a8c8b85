"""Chapter 7 · exercise 5: expert parallelism GShard's way, with a capacity per expert: built, run on the checker's
tokens and measured.

``collect`` calls the learner's ``moe_layer`` on the checker's cases (tokens, router choices and experts drawn from
the check's seed) under the profiler (``collectives_run_by``), and sends the output (a DTensor's
layout and blocks) and the collectives as plain data; ``judge`` computes the layer in NumPy.
"""
from .answers import global_numpy, layout_of, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback

MOE_CASES = (  # the mesh ('model': one expert per device), tokens, features in and out, the capacity per group
    {"mesh": (("batch", 4), ("model", 2)), "tokens": 16, "features": (4, 6), "capacity": 3},
    {"mesh": (("model", 4),), "tokens": 16, "features": (4, 6), "capacity": 1},
)


def moe_mesh(dims):
    """The checker's mesh of ``dims`` (``((name, size), ...)``) on this process's first logical CPUs."""
    from .answers import mesh_on_first_cpus

    return mesh_on_first_cpus(dims)


def moe_case(case, seed=0):
    """The tokens (float32, [T, d]), the router's choice of expert per token (int64, [T]) and the experts' weights
    (float32, [E, d, f]) of one case, drawn from ``seed``."""
    import numpy as np

    experts = dict(case["mesh"])["model"]
    d, f = case["features"]
    rng = np.random.default_rng([seed, 75, case["tokens"], experts])
    tokens = rng.normal(size=(case["tokens"], d)).astype("float32")
    expert_of = rng.integers(0, experts, case["tokens"]).astype("int64")
    return tokens, expert_of, rng.normal(size=(experts, d, f)).astype("float32")


def _reference_moe(tokens, expert_of, experts, capacity, groups, per_group=True):
    """Each token's output, as the layer computes it (float64): its expert's weight times the token, or zeros when
    the token is beyond its expert's ``capacity`` within its group (``per_group=False``: within the whole batch, a
    slip). ``capacity=None``: no token is dropped (the chapter's layer)."""
    import numpy as np

    out = np.zeros((len(tokens), experts.shape[-1]))
    size = len(tokens) // groups if per_group else len(tokens)
    taken = {}
    for index, (token, expert) in enumerate(zip(tokens, expert_of)):
        key = (index // size, int(expert))
        taken[key] = taken.get(key, 0) + 1
        if capacity is None or taken[key] <= capacity:
            out[index] = token.astype("float64") @ experts[expert].astype("float64")
    return out


class ExpertsWithCapacity(Exercise):
    title = "Expert parallelism with a capacity: build it, measure what it sends"
    points = 4
    hints = (
        "Number the tokens' slots first, on the host: within each group, the first token routed to expert e takes "
        "slot 0, the next slot 1, ...; a token whose slot would be capacity or more is dropped. Then the layer is the "
        "chapter's, with a slot axis: a dispatch tensor [groups, tokens per group, experts, capacity].",
        "dispatch[g, s, e, c] = 1 where token s of group g took slot c of expert e (np.cumsum of the one-hot choices "
        "along the group's tokens gives the slots). Pack it, the tokens as [groups, tokens per group, d] and the "
        "experts, each split over 'model' on axis 0; in a tf.function: einsum('gsec,gsd->egcd'), relayout to split "
        "the experts' axis, einsum with the experts, relayout back, einsum('gsec,egcf->gsf').",
        "A relayout from the groups' axis to the experts' is the all-to-all; each device then sends experts x "
        "capacity x d numbers, not a slot for every token. Return the last einsum's result (or reshaped to "
        "[tokens, f]): split over 'model' along the tokens.",
    )

    def collect(self, moe_layer, seed=0):
        """Call ``moe_layer(tokens, expert_of, experts, capacity, mesh)`` on each case of :data:`MOE_CASES`, under the
        profiler (``collectives_run_by`` calls it twice and records the second call's collectives).

        Crosses: ``{"callable": False}``, or ``{"callable": True, "cases": [{"mesh": [(axis, size), ...], "error"}
        or {"mesh", "output": what it returned (a DTensor crosses with its layout and blocks), "runs": [(kind, axes,
        tensor bytes), ...] or "profile_error"}, ...]}`` up to the first case that raised.
        """
        if not callable(moe_layer):
            return {"callable": False}
        from ..profiling import collectives_run_by

        cases = []
        for case in MOE_CASES:
            mesh = moe_mesh(case["mesh"])
            tokens, expert_of, experts = moe_case(case, seed)
            found, outputs = {"mesh": mesh_dims(mesh)}, []
            cases.append(found)

            def call():
                outputs.append(moe_layer(tokens.copy(), expert_of.copy(), experts.copy(), case["capacity"], mesh))
                return outputs[-1]

            try:  # the profiler calls it twice (the first compiles), and reads the second call's collectives
                found["runs"] = [(run.kind, tuple(run.axes), run.tensor_bytes) for run in collectives_run_by(call)]
            except Exception as err:
                if not outputs:  # moe_layer itself raised
                    found["error"] = short_error(err)
                    break
                found["profile_error"] = short_error(err)
            found["output"] = outputs[-1]
        return {"callable": True, "cases": cases}

    def judge(self, data, seed=0):
        """The output of each case against NumPy (a point per case), then the collectives of every case: two
        all-to-alls over 'model' and nothing else (1 point), moving the capacity's slots, not a slot per token
        (1 point)."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong("moe_layer should be a function (tokens, expert_of, experts, capacity, mesh) -> the layer's "
                     "output.")
            return fb
        given = list(data["cases"])
        if not 1 <= len(given) <= len(MOE_CASES):
            raise ValueError("no case data")
        traffic = []
        for case, found in zip(MOE_CASES, given):
            groups = dict(case["mesh"])["model"]
            where = (f"{case['tokens']} tokens in {groups} groups, capacity {case['capacity']}, on "
                     f"{mesh_text([tuple(dim) for dim in found['mesh']])}")
            if "error" in found:
                fb.wrong(f"moe_layer raised {str(found['error'])[:300]} ({where}). The checker calls it as "
                         f"moe_layer(tokens, expert_of, experts, capacity, mesh) with NumPy arrays and a mesh whose "
                         f"'model' axis has one device per expert.")
                return fb
            tokens, expert_of, experts = moe_case(case, seed)
            problem = self._judge_output(found["output"], tokens, expert_of, experts, case, found["mesh"])
            if problem:
                fb.wrong(f"{where}: {problem[0]}", answer=problem[1])
            else:
                fb.right(f"{where}: every token got its expert's output, and the tokens beyond the capacity zeros")
            traffic.append((case, found, where))
        if len(given) < len(MOE_CASES):
            raise ValueError("a case is missing from the data")
        self._judge_traffic(fb, traffic)
        return fb

    @staticmethod
    def _judge_output(output, tokens, expert_of, experts, case, mesh):
        """(what is wrong, the part that gives it away) about the layer's output, or None."""
        import numpy as np

        groups = dict(case["mesh"])["model"]
        layout = layout_of(output)
        if layout is None:
            return ("the output is not a DTensor: the layer runs on the mesh, each device computing its own "
                    "expert's tokens; return the DTensor its last einsum gives.", "")
        if mesh_dims(layout.mesh) != [tuple(dim) for dim in mesh]:
            return (f"the output lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the mesh passed in: "
                    f"build everything on moe_layer's `mesh`, whose 'model' axis has one device per expert.", "")
        rows, width = len(tokens), experts.shape[-1]
        value = np.asarray(global_numpy(output), dtype="float64")
        if value.size != rows * width:
            return (f"the output holds {value.size} numbers; the layer gives {width} features for each of the "
                    f"{rows} tokens.", "")
        value = value.reshape(rows, width)
        if specs(layout)[0] != "model":
            return (f"the output's layout {specs(layout)} does not split the tokens over 'model': the layer gives each "
                    f"group's outputs back to the device that holds the group.",
                    "Relayout the experts' results back to the groups' axis before the combining einsum.")
        capacity = case["capacity"]
        want = _reference_moe(tokens, expert_of, experts, capacity, groups)
        if np.allclose(value, want, rtol=1e-4, atol=1e-4):
            return None
        if np.allclose(value, _reference_moe(tokens, expert_of, experts, None, groups), rtol=1e-4, atol=1e-4):
            return (f"every token got its expert's output, though some experts were chosen by more than {capacity} "
                    f"token(s) of a group: with a capacity, the tokens beyond it are dropped (their output is zero).",
                    "Within each group, count the tokens routed to each expert in order; a token whose count exceeds "
                    "the capacity gets no slot.")
        if np.allclose(value, _reference_moe(tokens, expert_of, experts, capacity, groups, per_group=False),
                       rtol=1e-4, atol=1e-4):
            return ("the capacity was counted over the whole batch; GShard counts it per group: each group (each "
                    "device's tokens) has capacity slots per expert.", "")
        kept = np.any(want != 0, axis=1)
        if np.allclose(value[kept], want[kept], rtol=1e-4, atol=1e-4):
            return "the kept tokens are right, but the dropped ones are not zero.", ""
        return ("the outputs are not each token's expert times the token (zeros beyond the capacity): check the "
                "slots of the dispatch tensor, and the einsums' axes.", "")

    @staticmethod
    def _judge_traffic(fb, traffic):
        """The collectives of every case (1 point: two all-to-alls over 'model', nothing else) and their bytes (1
        point: each device's experts x capacity slots of d and of f numbers)."""
        kinds_ok, bytes_ok = True, True
        for case, found, where in traffic:
            if "profile_error" in found:
                fb.wrong(f"{where}: the checker could not record the collectives of a second call "
                         f"({str(found['profile_error'])[:200]}).")
                return
            runs = [(str(kind), tuple(axes), int(size)) for kind, axes, size in found["runs"]]
            kinds = sorted((kind, axes) for kind, axes, _ in runs)
            if kinds_ok and kinds != [("all-to-all", ("model",))] * 2:
                kinds_ok = False
                named = ", ".join(f"{kind} over {','.join(axes) or 'no axis'}" for kind, axes in kinds) or "none"
                if not runs:
                    why = ("nothing moved between devices: did every device compute every expert on every token? "
                           "The experts live one per device; the tokens must travel to them and back.")
                elif any(kind == "all-gather" for kind, _ in kinds):
                    why = ("an all-gather ran: some device received every token, or every expert. Only the "
                           "dispatched slots need to move, once to the experts and once back.")
                elif any(kind.endswith("all-reduce") for kind, _ in kinds):
                    why = ("an all-reduce ran: an einsum summed over a split axis (the tokens, or the groups?). The "
                           "dispatch einsum keeps the groups' axis in its output, so that nothing is summed across "
                           "devices.")
                else:
                    why = "the layer moves its slots to the experts and back: two all-to-alls, nothing else."
                fb.wrong(f"{where}: one call ran {named}; {why}",
                         answer="Relayout from the groups' axis to the experts' axis and back: the two all-to-alls.")
            experts, d, f = dict(case["mesh"])["model"], *case["features"]
            want = sorted(4 * experts * case["capacity"] * n for n in (d, f))
            sizes = sorted(size for kind, _, size in runs if kind == "all-to-all")
            if kinds_ok and bytes_ok and sizes != want:
                bytes_ok = False
                per_token = sorted(4 * experts * (case["tokens"] // experts) * n for n in (d, f))
                why = ("a slot for every token of the group (experts x tokens per group), as the chapter's layer "
                       "without a capacity does: the capacity is there to shrink what moves"
                       if sizes == per_token else "another size than the capacity's slots")
                fb.wrong(f"{where}: the all-to-alls moved {sizes} bytes per device: {why}.",
                         answer=f"Each device sends its experts x capacity slots: {want} bytes (d and f numbers "
                                f"per slot).")
        if kinds_ok:
            fb.right("each call ran two all-to-alls over 'model' (to the experts and back), nothing else")
        if kinds_ok and bytes_ok:
            fb.right("each all-to-all moved experts x capacity slots per device, less than a slot for every token")
