"""``google.colab.output``: the names JAX's Colab debugger imports (``jax._src.debugger.colab_lib``).

They are called only when a program drives Colab's page (JAX's interactive debugger), which a
test has no page for: each raises :class:`NotImplementedError` saying so.
"""
__all__ = ["clear", "eval_js", "redirect_to_element", "use_tags"]


def _no_front_end(name):
    def call(*args, **kwargs):
        raise NotImplementedError(f"google.colab.output.{name} needs Colab's page; this test stand-in has none.")
    call.__name__ = name
    call.__doc__ = f"Colab's ``output.{name}``; raises :class:`NotImplementedError` here (no page)."
    return call


clear = _no_front_end("clear")
eval_js = _no_front_end("eval_js")
redirect_to_element = _no_front_end("redirect_to_element")
use_tags = _no_front_end("use_tags")
