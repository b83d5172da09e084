from django import forms

from artifacts.models import ArtifactStore


class RetentionForm(forms.ModelForm[ArtifactStore]):
    class Meta:
        model = ArtifactStore
        fields = ["ttl_ms", "max_ttl_ms", "max_bytes_per_scope", "max_count_per_scope"]
        labels = {
            "ttl_ms": "Time to live (ms)",
            "max_ttl_ms": "Server maximum time to live (ms)",
            "max_bytes_per_scope": "Byte budget per scope",
            "max_count_per_scope": "Count budget per scope",
        }
        help_texts = {"ttl_ms": "Empty means no limit. Stated at mint; never extended."}

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        for name, value in list(cleaned.items()):
            if value is not None and value <= 0:
                self.add_error(name, "Must be greater than 0, or empty for no limit.")
        return cleaned


class HoldForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.TextInput(attrs={"placeholder": "why this is evidence"}))
