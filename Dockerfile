# The same server as `make run`, as a non-root user, with a /healthz health check.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    GATEWAY_HOST=0.0.0.0 GATEWAY_PORT=8080 \
    GATEWAY_DATABASE_URL=sqlite:////data/gateway.db GATEWAY_VAR_DIR=/data \
    GATEWAY_POLICY_DIR=/app/config/policies

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY rules ./rules
COPY config ./config
RUN pip install --no-cache-dir . \
 && useradd --system --uid 10001 --home /data gateway \
 && mkdir -p /data && chown gateway /data

USER gateway
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"
CMD ["gateway", "serve"]
