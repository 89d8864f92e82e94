"""The public API's entry points read what a caller hands them (``sources.given``): a spec where a model is taken,
one spec as one model, a LoadedModel where a tokenizer is taken, and anything else refused in one line that names
the entry point, never an AttributeError from deep inside nor, worse, a run on the wrong input."""

from __future__ import annotations

import pytest

import tito_audit as t
from tito_audit.trainer.batch_item import BatchItemError

QUICK = t.AuditOptions(scenarios="quick")


def test_one_spec_is_one_model_and_a_spec_is_loaded_where_a_model_is_taken():
    """``audit_models("qwen3-0.6b")`` audited each of the ten letters of the name as a model (ten error reports);
    ``audit_model("qwen3-0.6b")`` raised ``'str' object has no attribute 'tokenizer'``."""
    run = t.audit_models("qwen3-0.6b", QUICK)
    assert [m.model for m in run.models] == ["qwen3-0.6b"]
    direct = t.audit_model("qwen3-0.6b", QUICK)
    assert direct.verdict == run.models[0].verdict == t.audit_model(t.load("qwen3-0.6b"), QUICK).verdict
    assert direct.verdict != "error", direct.error


@pytest.mark.parametrize(
    ("call", "names"),
    [
        (lambda: t.load(123), "load:"),
        (lambda: t.audit_model(None), "audit_model:"),
        (lambda: t.audit_models(5), "audit_models:"),
        (lambda: t.audit_models(["qwen3-0.6b", 7]), "audit_models:"),
        (lambda: t.Trajectory.from_model("qwen3-0.6b"), "Trajectory.from_model"),
        (lambda: t.Trajectory.from_tokenizer(None), "Trajectory.from_tokenizer"),
        (lambda: t.check_batch([{"input_ids": [1], "loss_mask": [1]}], tokenizer="qwen3-0.6b"), "check_batch:"),
    ],
)
def test_a_wrong_kind_of_argument_is_a_type_error_naming_the_entry_point(call, names):  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError) as err:
        call()
    assert str(err.value).startswith(names) and "\n" not in str(err.value), str(err.value)


def test_check_batch_refuses_a_batch_that_is_no_list_and_takes_a_loaded_model_as_its_tokenizer():
    said = "a batch is a list of items or a mapping of columns, not int"
    with pytest.raises(BatchItemError, match=said):
        t.check_batch(123)
    assert t.check_batch(123, on_fail="return").errors == [said]
    model = t.load("qwen3-0.6b")
    traj = t.Trajectory.from_model(model)
    traj.start([{"role": "user", "content": "Hi"}])
    traj.append_sampled([*model.tokenizer.encode("Hello.", add_special_tokens=False), traj.stop_ids[0]])
    by_model = t.check_batch([traj], on_fail="return", tokenizer=model)
    by_tokenizer = t.check_batch([traj], on_fail="return", tokenizer=model.tokenizer)
    assert by_model.ok and by_model.not_checked == by_tokenizer.not_checked
    assert not any(n.startswith("ids after the stop not checked") for n in by_model.not_checked)  # stops known


def test_a_loaded_model_given_as_tokenizer_brings_its_template_and_a_spec_may_be_any_path_like():
    """Review 58: ``check_batch(tokenizer=model)`` kept only ``model.tokenizer``: a model with another template
    (``with_template``) was guarded on the tokenizer's own template's stops, not on those ``Trajectory.from_model``
    stops on. A path-like with only ``__fspath__`` was read as its ``str()``, and bytes one int at a time."""
    base = t.load("qwen3-0.6b")
    tok = base.tokenizer
    text_end, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
    other = base.with_template(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}<|endoftext|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}",
        "test",
    )
    assert text_end in t.Trajectory.from_model(other).stop_ids
    prompt = tok.encode("user: Hi<|endoftext|>assistant: ", add_special_tokens=False)
    turn = [*tok.encode("Hello.", add_special_tokens=False), text_end, im_end]  # <|im_end|> glued after the stop
    row = {"sampled": [turn], "input_ids": prompt + turn, "loss_mask": [0] * len(prompt) + [1] * len(turn)}
    assert t.check_batch([row], on_fail="return", tokenizer=tok).ok  # its own template ends turns with <|im_end|>
    failed = t.check_batch([row], on_fail="return", tokenizer=other)
    assert not failed.ok and "after the stop" in failed.failures[0].divergence.message

    class Spec:
        def __fspath__(self) -> str:
            return "qwen3-0.6b"

    assert t.load(Spec()).chat_template == base.chat_template
    with pytest.raises(TypeError, match="audit_models: expected model specs"):
        t.audit_models(b"qwen3-0.6b")
