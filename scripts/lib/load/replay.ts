// Whether a purchase sent again with the same Idempotency-Key got the answer it is owed: the
// object's decision for that key, again. Shared by the load test and the chaos run.
import { errorOf, read } from './contract.ts';
import type { Answer } from './http-client.ts';

type Reply = Pick<Answer, 'status' | 'json'>;

/** 503 answers the contract allows under load or while a dependency is away: the client retries. */
const ALLOWED_503 = new Set(['BUSY', 'UNAVAILABLE']);

/** A 202, or a refusal the goods' object may have decided: what a retry with the same key is owed again. */
const DECIDED = new Set([202, 409, 410, 423, 425]);

/** Whether an answer is one the client should retry after (no answer, 429, an allowed 503). */
export function retryable(answer: Reply): boolean {
  return answer.status === 0 || answer.status === 429 || allowed503(answer);
}

/** Whether the answer is 503 BUSY or UNAVAILABLE (the contract's retry-later answers). */
export function allowed503(answer: Reply): boolean {
  return answer.status === 503 && ALLOWED_503.has(errorOf(answer.json)?.code ?? '');
}

/**
 * Whether two answers to the same purchase with the same key agree; undefined when they cannot be
 * compared: the first was not a decision, or the retry was turned away before the object (no
 * answer, 429, BUSY, BANNED).
 *
 * Also not compared: SOLD_OUT against a per-shopper refusal (409), either way round. An isolate
 * that knows the goods is sold out answers SOLD_OUT from its copies to a key the object never
 * saw; the object refuses a shopper who already holds units before it looks at the stock (the
 * seed's order), so the same key may hear SOLD_OUT at the edge and ALREADY_PURCHASED from the
 * object, or the other way round on another isolate. Both are refusals, and neither sold a unit.
 * Every other change is a mismatch: above all a 202 that becomes a refusal or another request id.
 */
export function sameAnswer(first: Reply, again: Reply): boolean | undefined {
  if (!DECIDED.has(first.status) || retryable(again) || errorOf(again.json)?.code === 'BANNED') {
    return undefined;
  }
  if (soldOutOrHeld(first) && soldOutOrHeld(again) && first.status !== again.status) {
    return undefined;
  }
  return (
    again.status === first.status && (first.status !== 202 || read.queued(again.json)?.requestId === read.queued(first.json)?.requestId)
  );
}

function soldOutOrHeld(answer: Reply): boolean {
  const code = errorOf(answer.json)?.code;
  return (
    (answer.status === 410 && code === 'SOLD_OUT') || (answer.status === 409 && (code === 'ALREADY_PURCHASED' || code === 'LIMIT_REACHED'))
  );
}
