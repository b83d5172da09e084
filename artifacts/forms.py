from typing import Any

from django import forms

from artifacts.models import ArtifactStore
from footprint_site.lib import durations


class _AmountField(forms.CharField):
    """A number a person types with its unit ('7 d', '10 MB'), kept as the integer the store holds;
    shown back in the largest units that keep it exact. Empty means no limit."""

    example = "“7 d”, “12 h” or “1 h 30 min”"

    def parse(self, text: str) -> int:
        return durations.parse_duration_ms(text)

    def show(self, value: int) -> str:
        return durations.duration_exact_text(value)

    def prepare_value(self, value: Any) -> Any:
        return self.show(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def to_python(self, value: Any) -> int | None:  # type: ignore[override]
        text = super().to_python(value)
        if not text:
            return None
        if "\x00" in text:  # never echoed back into the page
            raise forms.ValidationError("Null characters are not allowed.")
        try:
            return self.parse(text)
        except ValueError as exc:
            raise forms.ValidationError(f"Write an amount with its unit, like {self.example}: {exc}.") from None


class DurationMsField(_AmountField):
    """Milliseconds, typed and shown as a duration."""


class SizeField(_AmountField):
    """Bytes, typed and shown in KB, MB or GB."""

    example = "“512 KB” or “10 MB”"

    def parse(self, text: str) -> int:
        return durations.parse_size(text)

    def show(self, value: int) -> str:
        return durations.size_exact_text(value)


class RetentionForm(forms.ModelForm[ArtifactStore]):
    ttl_ms = DurationMsField(
        required=False, label="Time to live", help_text="Empty means no limit. Stated at mint; never extended."
    )
    max_ttl_ms = DurationMsField(required=False, label="Server maximum time to live")
    max_bytes_per_scope = SizeField(required=False, label="Size budget per scope")

    class Meta:
        model = ArtifactStore
        fields = ["ttl_ms", "max_ttl_ms", "max_bytes_per_scope", "max_count_per_scope"]
        labels = {"max_count_per_scope": "Count budget per scope"}

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        for name, value in list(cleaned.items()):
            if value is not None and value <= 0:
                self.add_error(name, "Must be greater than 0, or empty for no limit.")
        return cleaned


class HoldForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"placeholder": "why this is evidence"}))
