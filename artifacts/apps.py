from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "artifacts"
    default_auto_field = "django.db.models.BigAutoField"
