# modelplan's worker and node agent. Build context: the repository root.
# The base is pinned to a patch release (bump it on purpose), the dependencies to requirements.lock.
FROM python:3.11.7-slim-bookworm
WORKDIR /app
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY planner planner
COPY worker worker
COPY producer producer
COPY examples examples
# the locked packages are already in: modelplan itself adds none, and a resolver run could not change them
RUN pip install --no-cache-dir --no-deps .
# a user of its own, by number, so that a runtime that refuses root (Kubernetes' runAsNonRoot) can tell
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin modelplan
# where a deployment keeps the roles' password files (docker-compose.yml's logins volume takes this
# folder's owner and mode when it is first made): the user's alone
RUN mkdir -p /etc/modelplan && chown 10001:10001 /etc/modelplan && chmod 0700 /etc/modelplan
USER 10001:10001
ENV MODELPLAN_REDIS_URL=redis://redis:6379/0
CMD ["modelplan", "worker"]
