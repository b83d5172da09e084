from typing import Any

import orjson
from django import forms


class DecisionForm(forms.Form):
    """Approve or decline (consent gates), or answer (plain asks). `by` is never a field."""

    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("decline", "Decline"), ("answer", "Answer")])
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
    value = forms.CharField(required=False, max_length=100_000, widget=forms.Textarea(attrs={"rows": 3}))
    value_is_json = forms.BooleanField(required=False, label="the answer is JSON")

    def __init__(self, *args: Any, plain: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plain = plain

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        decision = cleaned.get("decision")
        if self.plain and decision != "answer":
            raise forms.ValidationError("This question takes an answer, not approve or decline.")
        if not self.plain and decision == "answer":
            raise forms.ValidationError("This ask is approved or declined.")
        if decision == "answer" and cleaned.get("value_is_json"):
            try:
                cleaned["value"] = orjson.loads(cleaned.get("value") or "")
            except orjson.JSONDecodeError:
                self.add_error("value", "This is not valid JSON.")
        return cleaned
