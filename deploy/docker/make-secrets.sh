#!/bin/sh
# The compose deployment's secrets (docker-compose.yml `secrets:`), written once into
# ${SECRETS_DIR:-deploy/secrets} (git-ignored; the folder 0700, the files 0644 so that
# the containers' users can read their bind mounts); existing files are kept:
#   redis_password               the service's (and the exporter's) Redis password
#   redis.acl                    Redis' user file: `default` with that password's SHA-256
#   redis_exporter_passwords     redis_exporter's password map (JSON: address -> password)
#   grafana_admin_password       Grafana's admin password
#   ops_key                      the stack's @ops API key: api and scorers accept it, their
#                                health checks and Prometheus' scrapes send it (so that
#                                SCJEPA_OPS_KEY_ROUTES can protect /healthz, /readyz, /metrics)
#   replay_api_key               the replay profile's API key (tenant `replay`, accepted only
#                                when tenant keys are configured)
# Passwords and keys are 48 hex characters (safe inside a redis:// URL, an
# SCJEPA_API_KEYS entry and an HTTP header). A second run adds the files a newer
# docker-compose.yml needs and keeps the others.
#   deploy/docker/make-secrets.sh && docker compose up -d
set -eu
dir=${SECRETS_DIR:-"$(dirname "$0")/../secrets"}
mkdir -p "$dir"
chmod 700 "$dir"
umask 022
new() { python3 -c 'import secrets; print(secrets.token_hex(24))'; }
[ -s "$dir/redis_password" ] || new >"$dir/redis_password"
[ -s "$dir/grafana_admin_password" ] || new >"$dir/grafana_admin_password"
[ -s "$dir/ops_key" ] || new >"$dir/ops_key"
[ -s "$dir/replay_api_key" ] || new >"$dir/replay_api_key"
password=$(cat "$dir/redis_password")
hash=$(printf %s "$password" | python3 -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
# every command and key for `default` (the service uses Lua, streams, pub/sub)
printf 'user default on #%s ~* &* +@all\n' "$hash" >"$dir/redis.acl"
printf '{"redis://redis:6379": "%s"}\n' "$password" >"$dir/redis_exporter_passwords"
chmod 644 "$dir"/redis_password "$dir"/redis.acl "$dir"/redis_exporter_passwords \
    "$dir"/grafana_admin_password "$dir"/ops_key "$dir"/replay_api_key
echo "secrets in $dir"
