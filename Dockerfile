FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
# gcc only for as long as mypyc compiles the ingestion hot path (footprint_site/compiled.py).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir --no-deps -e . \
    && python -m footprint_site.compiled \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && DJANGO_SECRET_KEY=build DATABASE_URL=postgres://unused@localhost/unused python manage.py collectstatic --no-input
RUN useradd --create-home footprint && chown -R footprint /app
USER footprint
# The container's loopback is its own: listen on every interface (compose sets the same).
ENV HOST=0.0.0.0
EXPOSE 8000
CMD ["gunicorn", "footprint_site.wsgi", "-c", "gunicorn.conf.py"]
