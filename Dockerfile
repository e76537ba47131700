# modelplan's worker and node agent. Build context: the repository root.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY planner planner
COPY worker worker
COPY producer producer
COPY examples examples
RUN pip install --no-cache-dir .
ENV MODELPLAN_REDIS_URL=redis://redis:6379/0
CMD ["modelplan", "worker"]
