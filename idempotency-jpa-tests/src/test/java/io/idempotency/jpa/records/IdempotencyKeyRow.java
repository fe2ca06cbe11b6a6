package io.idempotency.jpa.records;

import jakarta.persistence.Column;
import jakarta.persistence.Entity;
import jakarta.persistence.IdClass;
import jakarta.persistence.Table;

import java.io.Serializable;

/**
 * The library's table mapped as an entity, as an application may map it for an operator's page of keys still in
 * progress: Hibernate's {@code ddl-auto=validate} looks for the table when the EntityManagerFactory is made.
 */
@Entity
@Table(name = "idempotency_keys")
@IdClass(IdempotencyKeyRow.Id.class)
public class IdempotencyKeyRow {

    @jakarta.persistence.Id
    private String caller;

    @jakarta.persistence.Id
    private String scope;

    @jakarta.persistence.Id
    @Column(name = "idempotency_key")
    private String key;

    @Column(name = "status", length = 16)
    private String status;

    public String key() {
        return key;
    }

    public String status() {
        return status;
    }

    /** The row's identity. */
    public static class Id implements Serializable {
        private String caller;
        private String scope;
        private String key;

        @Override
        public boolean equals(Object other) {
            return other instanceof Id id && java.util.Objects.equals(caller, id.caller)
                    && java.util.Objects.equals(scope, id.scope) && java.util.Objects.equals(key, id.key);
        }

        @Override
        public int hashCode() {
            return java.util.Objects.hash(caller, scope, key);
        }
    }
}
