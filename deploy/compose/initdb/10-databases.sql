-- One database per service (run once, at the first start of an empty data
-- volume, by the Postgres image's /docker-entrypoint-initdb.d). Each service
-- creates its own tables with its embedded migrations.
CREATE DATABASE orders;
CREATE DATABASE timeouts;
-- The example service examples/reservations.
CREATE DATABASE reservations;
