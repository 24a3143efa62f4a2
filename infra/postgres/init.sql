-- Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d),
-- as $POSTGRES_USER, who owns the four databases below. One server, separate databases:
--   mlflow   MLflow tracking + model registry backend store (and its webhooks table)
--   prefect  Prefect server (flow runs, deployments, work pools, events)
--   vlgate   vlgate's own state: the claims table that makes "version registered"
--            into exactly one validation run (VLGATE_STATE_DB)
--   mlflow_auth  MLflow's basic-auth app: its users and their grants
-- Later changes to this file do not touch an existing volume.
CREATE DATABASE mlflow;
CREATE DATABASE prefect;
CREATE DATABASE vlgate;
CREATE DATABASE mlflow_auth;
