-- Whether a report fact passes the dimension filters (docs/reports.md, "Dimensions"): each filter is "any of" its
-- values; an empty array does not filter; a fact whose country is not known passes no `country=` filter. The
-- reports that read facts apply it in PostgreSQL so that a filtered report decodes only its own rows
-- (LedgerCore's `ReportDimensions.matches` decides again). One SQL expression, IMMUTABLE: the planner inlines it.
CREATE OR REPLACE FUNCTION subledger_report_matches(
    store text, country text, product_id text, entitlements text[],
    stores text[], countries text[], products text[], wanted text[]
) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (cardinality(stores) = 0 OR store = ANY(stores))
       AND (cardinality(countries) = 0 OR country = ANY(countries))
       AND (cardinality(products) = 0 OR product_id = ANY(products))
       AND (cardinality(wanted) = 0 OR entitlements && wanted)
$$;
