package io.idempotency.jpa.app;

import jakarta.persistence.Entity;
import jakarta.persistence.Id;
import jakarta.persistence.Table;
import jakarta.persistence.Version;

/** A balance under optimistic locking: Hibernate's UPDATE at the flush checks the version it read. */
@Entity
@Table(name = "accounts")
public class Account {

    @Id
    private Long id;

    private long balance;

    @Version
    private long version;

    protected Account() {
    }

    public Long getId() {
        return id;
    }

    public long getBalance() {
        return balance;
    }

    public void setBalance(long balance) {
        this.balance = balance;
    }

    public long getVersion() {
        return version;
    }
}
