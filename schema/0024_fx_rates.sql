-- Exchange rates as reference data with history (docs/reports.md, "Reporting currency"): units of a currency
-- per 1 EUR on a date, as the European Central Bank publishes them. Every upload that brings a new or a
-- different rate is a version; a rate once stored is never changed (a correction is a row of a later
-- version), and a report names the version it used, so it can be asked for again with the same rates.

CREATE TABLE fx_rate_versions (
    version    bigint      PRIMARY KEY CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Where it came from: 'api' (PUT /v1/fx/rates) or 'cli' (subledger fx import), and a label (the file).
    origin     text        NOT NULL CHECK (origin IN ('api', 'cli')),
    label      text        NOT NULL CHECK (length(label) <= 200),
    -- Rates in the upload, of which new (date, currency) pairs and corrections of a stored value.
    rates      integer     NOT NULL CHECK (rates >= 0),
    added      integer     NOT NULL CHECK (added >= 0),
    corrected  integer     NOT NULL CHECK (corrected >= 0)
);

CREATE TABLE fx_rates (
    currency text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$' AND currency <> 'EUR'),
    day      date    NOT NULL CHECK (day BETWEEN DATE '1999-01-01' AND DATE '2100-12-31'),
    version  bigint  NOT NULL REFERENCES fx_rate_versions (version),
    rate     numeric NOT NULL CHECK (rate > 0),
    PRIMARY KEY (currency, day, version)
);

-- Reference data with history is append-only like the events: no update, delete or truncate.
CREATE TRIGGER fx_rate_versions_reject_update_delete BEFORE UPDATE OR DELETE ON fx_rate_versions
    FOR EACH ROW EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER fx_rate_versions_reject_truncate BEFORE TRUNCATE ON fx_rate_versions
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER fx_rates_reject_update_delete BEFORE UPDATE OR DELETE ON fx_rates
    FOR EACH ROW EXECUTE FUNCTION subledger_reject_change();
CREATE TRIGGER fx_rates_reject_truncate BEFORE TRUNCATE ON fx_rates
    FOR EACH STATEMENT EXECUTE FUNCTION subledger_reject_change();
ALTER TABLE fx_rate_versions ENABLE ALWAYS TRIGGER fx_rate_versions_reject_update_delete;
ALTER TABLE fx_rate_versions ENABLE ALWAYS TRIGGER fx_rate_versions_reject_truncate;
ALTER TABLE fx_rates ENABLE ALWAYS TRIGGER fx_rates_reject_update_delete;
ALTER TABLE fx_rates ENABLE ALWAYS TRIGGER fx_rates_reject_truncate;

REVOKE ALL ON fx_rate_versions, fx_rates FROM PUBLIC;
GRANT SELECT, INSERT ON fx_rate_versions, fx_rates TO subledger_app;
