# Build stage: the whole lock, for mypyc (which compiles the ingestion hot path,
# footprint_site/compiled.py) and a C compiler; collectstatic gathers the static files.
FROM python:3.11-slim AS build
ENV PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
    && python -m footprint_site.compiled \
    && DJANGO_SECRET_KEY=build DATABASE_URL=postgres://unused@localhost/unused python manage.py collectstatic --no-input

# The image: what the server runs on (requirements-runtime.lock, pinned as in requirements.lock),
# the code with its compiled copies from the build stage; no compiler, test or type-checking tools.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH=/app
WORKDIR /app
COPY requirements-runtime.lock ./
RUN pip install --no-cache-dir -r requirements-runtime.lock
# /archive: retention's archive directory, a volume every node shares (docker-compose.yml).
RUN useradd --create-home footprint && mkdir /archive && chown footprint /archive
COPY --from=build --chown=footprint /app /app
USER footprint
# The container's loopback is its own: listen on every interface (compose sets the same).
ENV HOST=0.0.0.0
EXPOSE 8000
CMD ["gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
