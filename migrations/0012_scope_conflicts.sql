-- Stripe object ids are globally unique, so business rows are keyed by the
-- object id alone and the Connect account is an attribute checked on every
-- event. An event that names another account for an object already stored
-- (an organisation destination's `context` on the platform's own event, a
-- misrouted endpoint) is recorded here, once per object and event, for an
-- operator to look at; its effects still apply once, to the one row.
CREATE TABLE scope_conflicts (
    id             bigserial PRIMARY KEY,
    object_type    text        NOT NULL,
    object_id      text        NOT NULL,
    stored_account text        NOT NULL,
    event_account  text        NOT NULL,
    event_id       text        NOT NULL,
    seen_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (object_type, object_id, event_id)
);
