// The seed article's webhook handler ("Webhooks are a different ledger"),
// written as its reader would: express raw body, stripe.webhooks.constructEvent,
// the article's withTransaction and claim loop keyed by the event id, and a
// unique index on the payment id. One process. The benchmark's peer.
const { createHash } = require("node:crypto");
const express = require("express");
const { Pool } = require("pg");
const Stripe = require("stripe");

const stripe = Stripe("sk_test_unused");
const secret = process.env.STRIPE_WEBHOOK_SECRET;
const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.POOL_MAX || 10) });
const ENDPOINT = "POST /webhooks/stripe";

const fingerprint = (endpoint, body) =>
  createHash("sha256").update(`${endpoint} ${JSON.stringify(body)}`).digest("hex");

async function withTransaction(pool, fn) {
  const tx = await pool.connect();
  try {
    await tx.query("BEGIN");
    const out = await fn(tx);
    await tx.query("COMMIT");
    return out;
  } catch (err) {
    await tx.query("ROLLBACK").catch(() => {});
    throw err;
  } finally {
    tx.release();
  }
}

// The payment an event pays for, or null when it pays for nothing.
function paymentId(event) {
  const obj = event.data.object;
  if (event.type === "checkout.session.completed" && obj.payment_status === "paid") return obj.payment_intent;
  if (event.type === "payment_intent.succeeded") return obj.id;
  return null;
}

async function handle(pool, event) {
  const fp = fingerprint(ENDPOINT, event);
  return withTransaction(pool, async (tx) => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const claim = await tx.query(
        `INSERT INTO idempotency_keys (key, endpoint, request_fp, status)
         VALUES ($1, $2, $3, 'in_progress')
         ON CONFLICT (key) DO NOTHING
         RETURNING key`,
        [event.id, ENDPOINT, fp]
      );
      if (claim.rowCount === 0) {
        const prior = (await tx.query(
          `SELECT endpoint, request_fp, status, response FROM idempotency_keys WHERE key = $1`,
          [event.id]
        )).rows[0];
        if (prior === undefined) continue;
        if (prior.status === "completed") return { status: 200, body: prior.response, replayed: true };
        return { status: 409, body: { error: "request_in_progress" } };
      }
      let outcome = "ignored";
      const payment = paymentId(event);
      if (payment) {
        const fulfilled = await tx.query(
          `INSERT INTO fulfilments (payment_id, event_id) VALUES ($1, $2)
           ON CONFLICT (payment_id) DO NOTHING RETURNING id`,
          [payment, event.id]
        );
        outcome = fulfilled.rowCount === 1 ? "fulfilled" : "already_fulfilled";
      }
      const response = { event_id: event.id, outcome };
      await tx.query(
        `UPDATE idempotency_keys SET status = 'completed', response = $1 WHERE key = $2`,
        [JSON.stringify(response), event.id]
      );
      return { status: 200, body: response, replayed: false };
    }
    return { status: 409, body: { error: "claim_contended" } };
  });
}

const app = express();
app.get("/healthz", (req, res) => res.json({ status: "ok" }));
app.post("/webhooks/stripe", express.raw({ type: "application/json" }), async (req, res) => {
  let event;
  try {
    event = stripe.webhooks.constructEvent(req.body, req.headers["stripe-signature"], secret);
  } catch (err) {
    return res.status(400).json({ error: "invalid_signature" });
  }
  try {
    const out = await handle(pool, event);
    if (out.replayed) res.set("Idempotent-Replayed", "true");
    res.status(out.status).json(out.body);
  } catch (err) {
    res.status(500).json({ error: "failed" });
  }
});

app.listen(Number(process.env.PORT || 3000), process.env.HOST || "127.0.0.1");
