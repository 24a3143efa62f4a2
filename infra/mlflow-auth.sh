#!/bin/sh
# Entrypoint of compose.yaml's mlflow service: writes MLflow's basic-auth config
# (MLFLOW_AUTH_CONFIG_PATH) from the container's environment, readable by this user only,
# then runs the command (mlflow server --app-name=basic-auth ...). The file holds the
# database URL with its password, so it is made at start inside the container, never
# baked into the image or committed. The admin's password is not written: MLflow reads it
# from MLFLOW_AUTH_ADMIN_PASSWORD (and creates the admin on its first start).
# default_permission NO_PERMISSIONS: an account without a grant sees nothing; a checked
# password is trusted for 60 s, per server worker (MLflow's check is a slow hash on every
# request otherwise) (infra/README.md, "Authentication").
set -eu
config="${MLFLOW_AUTH_CONFIG_PATH:?set MLFLOW_AUTH_CONFIG_PATH}"
umask 077
mkdir -p "$(dirname "$config")"
cat > "$config" <<CONFIG
[mlflow]
default_permission = NO_PERMISSIONS
database_uri = ${MLFLOW_AUTH_DATABASE_URI:?set MLFLOW_AUTH_DATABASE_URI}
admin_username = ${MLFLOW_AUTH_ADMIN_USERNAME:?set MLFLOW_AUTH_ADMIN_USERNAME}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = ${MLFLOW_AUTH_CACHE_TTL_SECONDS:-60}
CONFIG
exec "$@"
