-- Money refunded is what was captured and then given back.
--
-- Before API 2025-03-31 (basil) a partial capture or a cancelled
-- authorisation created a Refund for the released, never captured part: it
-- moved the charge's amount_refunded and sent charge.refunded (Stripe's
-- changelog, "Partially capturing or canceling payments no longer creates a
-- Refund"). Counted as a refund, a 30.00 capture of a 100.00 authorisation
-- was "fully refunded" (70.00 of it) and its order held, or reported refunded.
--
-- `amount_captured` is the charge's (0 for a cancelled authorisation);
-- `released` the part of a pre-basil charge's amount_refunded that was
-- released uncaptured, so that the Refund Stripe made for it is known
-- (refunds.py). `charge_refunded` holds the charge's amount_refunded less
-- that part from now on; rows stored before cannot be told apart.
ALTER TABLE payments
    ADD COLUMN amount_captured bigint,
    ADD COLUMN released bigint NOT NULL DEFAULT 0;

-- Stripe's own Refunds (a release, an expired authorisation) carry no reason
-- or `expired_uncaptured_charge`; a shop's carry the one it gave, if any.
ALTER TABLE refunds ADD COLUMN reason text;

-- Fully refunded: all that was captured went back (the amount, when no
-- charge has said what was captured).
ALTER TABLE payments DROP COLUMN refunded;
ALTER TABLE payments ADD COLUMN refunded boolean GENERATED ALWAYS AS (
    coalesce(amount_refunded > 0 AND amount_refunded >= coalesce(amount_captured, amount), false)
) STORED;
