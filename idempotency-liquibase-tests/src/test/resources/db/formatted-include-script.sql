--liquibase formatted sql

--changeset shop:orders
CREATE TABLE orders (id bigserial PRIMARY KEY, reference varchar(64) NOT NULL UNIQUE);

--include file:io/idempotency/jdbc/postgresql/schema.sql
