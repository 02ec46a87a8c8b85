"""Chapter 7 · exercise 2: which key a LayoutMap finds for two paths under the chapter's three rules (tf_keras's
re.match, Keras 3.13's re.search, Keras 3.15's re.fullmatch), a prediction whose keys and paths vary per student.

The answers are data; ``grade`` compares them with what the rules find (:func:`_reference_layout_map_lookup`) and
names a mixed-up rule without giving the answer.
"""
import re

from .answers import grade_items, only_ellipses
from . import ch7_texts
from .core import Exercise, Feedback

# Exercise 2: which key a LayoutMap gives two paths, under the three rules of the chapter. It varies per student
# (:mod:`.variants`): the model's and the layer's names in the paths, and the two keys, drawn from KEY_POOL.
KEYS = ("dense_1", ".*dense_1/kernel")  # inserted in this order (the defaults')
PATHS = {"kernel": "mlp/dense_1/kernel", "bias": "mlp/dense_1/bias"}
RULES = {"tf_keras": re.match, "keras_3_13": re.search, "keras_3_15": re.fullmatch}
OUTCOMES = KEYS + ("replicated", "ValueError")
LOOKUP_MODELS = ("mlp", "model", "net", "encoder", "tower", "classifier")  # a variant's model name
LOOKUP_LAYERS = ("dense_1", "dense_2", "dense", "hidden", "proj", "ffn_1", "output")  # and layer name
KEY_POOL = ("{l}", ".*{l}/kernel", ".*{l}/bias", "{m}/{l}", "{m}/.*", "kernel", "bias", ".*kernel", ".*bias", "{l}/.*",
            ".*{l}/.*", "{l}/kernel", "{l}/bias", "{m}", ".*/kernel", ".*/bias", "{m}/{l}/.*")  # never a whole path:
# both LayoutMaps return an exact key before they try any rule (measured: test_variants), which the question omits
CHAPTER_KEYS = (".*kernel", ".*dense_1/.*")  # the chapter's probe with two keys (on mlp/dense_1/kernel)


def _paths(params):
    """{"kernel": its path, "bias": its path} of the variant ``params``."""
    return {part: f"{params['model']}/{params['layer']}/{part}" for part in PATHS}


def _reference_lookup_as(matcher, first_wins, path, keys):
    """What a LayoutMap would find for ``path`` if it matched with ``matcher`` (re's function) and, when several keys
    match, took the first inserted (``first_wins``) or raised: 'replicated' when none matches. A rule of RULES is one
    of these (:func:`_reference_layout_map_lookup`), and so is a typical wrong answer of exercise 2."""
    found = [key for key in keys if matcher(key, path)]
    if not found:
        return "replicated"
    return found[0] if first_wins or len(found) == 1 else "ValueError"


def _reference_layout_map_lookup(rule, path, keys=KEYS):
    """The key a LayoutMap with ``keys`` (inserted in this order) finds for ``path`` under ``rule`` (a key of RULES),
    'replicated' or 'ValueError': under tf_keras the first key inserted wins, under Keras 3 several matches raise."""
    return _reference_lookup_as(RULES[rule], rule == "tf_keras", path, keys)


MATCHES = {"match": "from the START of the path only", "search": "anywhere in the path",
           "fullmatch": "only the WHOLE path"}  # what each of re's functions asks of a key


def _reference_lookup_mixup(rule, path, keys, given):
    """Why ``given`` is wrong for ``path`` under ``rule`` when it is what a mixed-up rule finds (another function of
    re, or the other way of treating several matches); "" when it is no such mix-up. Says what is wrong, not the
    answer."""
    matcher, first_wins = RULES[rule], rule == "tf_keras"
    if _reference_lookup_as(matcher, not first_wins, path, keys) == given:
        return (" tf_keras does not raise when several keys match: the first key inserted wins." if first_wins else
                f" That is what tf_keras's rule would give (the first key that matches); check how {rule} treats "
                f"several keys that match.")
    for other in RULES.values():
        if other is not matcher and _reference_lookup_as(other, first_wins, path, keys) == given:
            return (f" That is what re.{other.__name__} ({MATCHES[other.__name__]}) would find; {rule} uses "
                    f"re.{matcher.__name__}, which matches {MATCHES[matcher.__name__]}.")
    return ""


def _reference_lookups(params):
    """Exercise 2's answer for the variant ``params``: {"<part>, <rule>": what the LayoutMap finds}."""
    return {f"{part}, {rule}": _reference_layout_map_lookup(rule, path, params["keys"])
            for part, path in _paths(params).items() for rule in RULES}


def _reference_lookup_comment(rule, path, keys):
    """The comment of one line of the solution cell: why, where the line needs it (the defaults' as they were)."""
    found = [key for key in keys if RULES[rule](key, path)]
    if rule == "tf_keras" and found:
        return ("both match from the start: the first inserted wins" if len(found) == 2 else
                f"{keys[0]!r} does not match from the start of '{path.split('/')[0]}/...'" if found[0] != keys[0]
                else "")
    if rule == "keras_3_13":
        return "both keys occur somewhere in the path" if len(found) == 2 else ""
    if rule == "keras_3_15" and found:
        return "only this one matches the whole path" if len(found) == 1 else "both match the whole path"
    return ""


def _reference_lookup_draw_is_valid(params):
    """The three rules do not all agree and the six answers take at least three values; not the chapter's probe."""
    found = _reference_lookups(params)
    columns = {rule: tuple(found[f"{part}, {rule}"] for part in PATHS) for rule in RULES}
    chapter = tuple(params["keys"]) == CHAPTER_KEYS and (params["model"], params["layer"]) == ("mlp", "dense_1")
    exact = set(params["keys"]) & set(_paths(params).values())
    return len(set(columns.values())) >= 2 and len(set(found.values())) >= 3 and not chapter and not exact


NO_KEY = ("none", "replicated", "no key", "no match", "nothing", "[]", "()", "", "no key: replicated",
          "none (replicated)", "replicated (no key)", "not split")
RAISES = ("valueerror", "value error", "raises valueerror", "raises", "raise", "error", "ambiguous",
          "raises a valueerror", "valueerror (several keys)")


def _outcome(raw, outcomes=OUTCOMES):
    """One of ``outcomes`` (the keys, 'replicated', 'ValueError'): a key, 'replicated' (None, (), [], 'none', 'no
    key', ...) or 'ValueError' (class, instance or name, any case); a compiled pattern as its text."""
    if raw is None or isinstance(raw, (list, tuple, dict, set)) and not raw:
        return "replicated"
    if isinstance(raw, Exception):
        raw = type(raw)
    if isinstance(raw, type) and issubclass(raw, Exception):
        raw = raw.__name__
    if isinstance(raw, re.Pattern):
        raw = raw.pattern
    if isinstance(raw, str):
        text = raw.strip().strip("'\"").strip()
        if text in outcomes:
            return text
        words = " ".join(text.lower().replace(".", " ").split())
        return ("replicated" if words in NO_KEY or text.lower() in NO_KEY else
                "ValueError" if words in RAISES else None)
    return None


class LayoutMapRules(Exercise):
    title = "Which key does a LayoutMap find? Three rules"
    points = 6
    none_is_answer = True  # None, () and [] mean "no key: replicated"; the placeholders are `...`
    # A prediction: re's functions, or a LayoutMap, print the answer; it counts only when checked before they are in
    # the notebook's reach (the notebook tries them after the check).
    revealed_by = ("re:match", "re:search", "re:fullmatch", "keras.src.distribution.distribution_lib:LayoutMap",
                   "tf_keras.src.dtensor.layout_map:LayoutMap")
    hints = (
        "Try each key on the path with the rule's function: re.match (from the start), re.search "
        "(anywhere), re.fullmatch (the whole path). Both paths start with '{{model}}/'.",
        "Then count the keys that matched. tf_keras takes the first one inserted; Keras 3 raises a ValueError "
        "when more than one matches; no match at all means the weight is replicated.",
    )

    defaults = {"model": "mlp", "layer": "dense_1", "keys": list(KEYS)}
    templates = {"c05": ch7_texts.LOOKUP_QUESTION, "ch7-q2": ch7_texts.LOOKUP_SOLUTION, "c06a": ch7_texts.LOOKUP_WATCH}

    @staticmethod
    def draw(rng):
        """A model and a layer name, and two keys of KEY_POOL for them (see
        :func:`_reference_lookup_draw_is_valid`); never the defaults."""
        while True:
            model, layer = rng.choice(LOOKUP_MODELS), rng.choice(LOOKUP_LAYERS)
            keys = [key.format(m=model, l=layer) for key in rng.sample(KEY_POOL, 2)]
            params = {"model": model, "layer": layer, "keys": keys}
            if params != LayoutMapRules.defaults and _reference_lookup_draw_is_valid(params):
                return params

    def text_values(self):
        paths = _paths(self.params)
        return {**self.params, "key_1": self.params["keys"][0], "key_2": self.params["keys"][1],
                "kernel_path": paths["kernel"], "bias_path": paths["bias"]}

    def reference_values(self):
        keys, lines = self.params["keys"], []
        for part, path in _paths(self.params).items():
            for rule in RULES:
                line = f'    "{part}, {rule}": "{_reference_layout_map_lookup(rule, path, keys)}",'
                lines.append((line, _reference_lookup_comment(rule, path, keys)))
        column = next((len(line) + 2 for line, comment in lines if comment), 0)
        return {"found_lines": "\n".join(f"{line.ljust(column - 2)}  # {comment}" if comment else line
                                          for line, comment in lines)}

    def collect(self, found, seed=0):
        """The answers as plain data: a compiled pattern as its text (``seed`` changes nothing)."""
        if isinstance(found, dict):
            found = {key: value.pattern if isinstance(value, re.Pattern) else value for key, value in found.items()}
        return [found]

    def grade(self, found):
        expected, paths = _reference_lookups(self.params), _paths(self.params)
        outcomes = [*self.params["keys"], "replicated", "ValueError"]

        def explain(key, given, raw):
            part, rule = key.split(", ")
            if given is None:
                return f"answer one of {outcomes}, got {raw!r}.", ""
            matcher = RULES[rule].__name__
            mixup = _reference_lookup_mixup(rule, paths[part], self.params["keys"], given)
            return (f"apply re.{matcher} to each key and the path {paths[part]!r}, then "
                    f"{'take the first that matches' if rule == 'tf_keras' else 'count the matches'}.{mixup}", "")

        return grade_items(Feedback(), found, expected, explain, lambda raw: _outcome(raw, outcomes),
                           "a key, 'replicated' or 'ValueError'",
                           unanswered=only_ellipses)

    def unanswered(self, answer):
        return only_ellipses(answer)
