import { type Context, Hono } from 'hono';
import type { GoodsRow } from '../../../db/goods';
import { acquirePermit, enterInFlight } from '../../edge/admission';
import { clientKeys, ipKey } from '../../edge/client-guard';
import { countEarlyAnswer } from '../../edge/early-answers';
import {
  checkPurchaseToken,
  KEYED_GRACE_MS,
  keyedRefusalBeforeBody,
  keyedRefusalFromCopies,
  purchaseIdOf,
  refusal,
  refusalFromCopies,
  replayedToRetries,
} from '../../edge/purchase';
import { reserve } from '../../edge/reserve-client';
import { claimedPurchaseExpiry, goodsOfPurchasePath } from '../../edge/signed';
import { acceptedKeyedOf, markInStock, markSoldOut, recheckSoldOut, rememberKeyedAnswer, soldOutNow } from '../../edge/sold-out';
import { IdempotencyKey, type ReserveOutcome } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import {
  IdempotencyHeader,
  idempotencyHeaderFast,
  PurchaseBody,
  PurchasePathParam,
  purchaseBodyFast,
  purchasePathFast,
} from '../../kernel/http-bodies';
import { admissionRate } from '../../kernel/limits';
import { log } from '../../kernel/log';
import { type AppEnv, waitUntilOf } from '../context';
import { goodsOf } from '../middleware/goods';
import { requireJsonMedia } from '../middleware/require-json';
import { admitSale } from '../middleware/sale-limits';
import { signIn } from '../middleware/shopper-auth';
import { validStep } from '../middleware/validate';
import { onError } from '../on-error';

// POST /api/seckill/do/:path, the purchase, as one pipeline of named checks, cheapest first.
// Before it, on every shopper route (app.ts): shopperFront (the client's address, the runtime
// limits, the shield).
//
//   requireJson      415 unless the body is JSON
//   refuseFromPath   when the hidden path names its goods (every path issued now does), before
//                    the body is read: without an Idempotency-Key, 404 unknown goods, 410 ENDED,
//                    425 NOT_STARTED, 423 PAUSED, 410 SOLD_OUT from the isolate's copies (no
//                    sign-in needed, so the flood after a sell-out costs neither a body, nor a
//                    signature check, nor an object call; each such answer counts toward the
//                    client's ban, reported in the background); with one, while the goods is
//                    known sold out, 401 unless signed in, then 410 SOLD_OUT unless the object
//                    answered this key
//   purchaseBody     400 unless it is {goodsId, token, quantity?} (quantity 1-100, default 1);
//                    403 TOKEN_INVALID when the path named another goods
//   refuseFromCache  the same answers for a path that names no goods (issued before paths did)
//   shopperAuth      401 unless a valid shopper JWT
//   purchasePath     400 unless the hidden path has its shape
//   idempotencyKey   400 unless the Idempotency-Key (optional) is printable ASCII
//   purchaseRequest  the purchase's request id (derived from the key, so a retry finds its answer)
//   refuseKeyed      with an Idempotency-Key: the same answers from the isolate's copies, unless
//                    the object may owe this key an earlier answer: 425 always before the start;
//                    410 ENDED / 423 PAUSED once the token is past its lifetime and the grace;
//                    410 SOLD_OUT unless the object answered this key (its SOLD_OUT lists the
//                    keyed purchases it accepted lately; this isolate remembers its own answers)
//   saleLimits       429 RATE_LIMITED / 403 BANNED: exact per-IP and per-shopper limits, bans
//   loadGoods        the goods' row (read by an earlier step already; 404 unknown goods)
//   withinLimit      400 INVALID_INPUT when the quantity is above the goods' perUserLimit
//   verifyToken      403 TOKEN_INVALID unless token and path are this shopper's, for this goods,
//                    and unexpired (a keyed retry: expired less than KEYED_GRACE_MS ago)
//   inFlightCap      503 BUSY when this isolate already has inFlightPerGoods waiting on the object
//   admission        503 BUSY beyond admissionPerSecond to the goods' object, across isolates
//   reserveUnit      the goods' object decides (group commit): eligibility (403 NOT_ELIGIBLE), the
//                    shopper's limit (409 LIMIT_REACHED), the units left (410 SOLD_OUT, with
//                    `remaining` when fewer are left than asked for); 202 with the purchase id

/**
 * A check of the pipeline: a Response (a refusal from the isolate's copies, returned rather than
 * thrown back through the checks before it) ends the request there; anything else, or a promise
 * of it, lets the next check run; a refusal of the shopper's input is thrown (AppError, answered
 * by onError). The route runs the checks itself, one after the other, instead of as a Hono
 * middleware each: a middleware costs a closure and two promises whether or not its check waits
 * on anything, and most of these do not.
 */
type Check = (c: Context<AppEnv>) => unknown;

const purchaseBody = validStep(
  'json',
  PurchaseBody,
  (c, body) => {
    // refuseFromPath read the goods the path names: the body must be about that one.
    const named = c.get('goods');
    if (named !== undefined && named.id !== body.goodsId) {
      throw new AppError('TOKEN_INVALID', 'the purchase path is for another goods');
    }
    c.set('goodsId', body.goodsId);
    c.set('purchaseToken', body.token);
    c.set('quantity', body.quantity);
  },
  purchaseBodyFast,
);

function withinLimit(c: Context<AppEnv>): void {
  const goods = c.get('goods'),
    quantity = c.get('quantity');
  if (quantity > goods.perUserLimit) {
    throw new AppError('INVALID_INPUT', `json quantity: at most ${goods.perUserLimit} per shopper for this goods`);
  }
}

/**
 * One of the answers from the isolate's copies; when `answerOf` gives one (or the goods is
 * unknown), it counts toward the client's ban (in the isolate, reported in the background) and
 * is the answer, returned here rather than thrown back through every step before this one (a
 * sale's flood is mostly these answers). An outage (no goods list to be had) is not the
 * client's doing: it is thrown, and not counted.
 */
async function answerFromCopies(
  c: Context<AppEnv>,
  ids: string[],
  answerOf: (goods: GoodsRow) => AppError | undefined,
): Promise<Response | undefined> {
  let answer: AppError | undefined;
  try {
    answer = answerOf(await goodsOf(c));
  } catch (error) {
    if (!(error instanceof AppError && error.code === 'NOT_FOUND')) {
      throw error;
    }
    answer = error;
  }
  if (answer === undefined) {
    return undefined;
  }
  countEarlyAnswer(c.env, ids, c.get('limits'), waitUntilOf(c));
  // As app.onError would answer it; requestMetrics reads the outcome from c.error.
  c.error = answer;
  return onError(answer, c);
}

/** The answers from the isolate's copies for a request without an Idempotency-Key, about c's goodsId. */
function refuseUnkeyed(c: Context<AppEnv>): Promise<Response | undefined> {
  // Before sign-in only the address is known (a claimed shopper is not to be counted).
  const ip = c.get('clientIp');
  return answerFromCopies(c, ip ? [ipKey(ip)] : [], (goods) => refusalFromCopies(goods, Date.now()));
}

/**
 * A keyed purchase of a goods this isolate knows to be sold out: signed in early, so that the
 * key gives its request id before the body is read; refused unless the object answered its key.
 */
async function refuseKeyedEarly(c: Context<AppEnv>, key: string): Promise<Response | undefined> {
  const goodsId = c.get('goodsId');
  if (!soldOutNow(goodsId) || !IdempotencyKey.safeParse(key).success) {
    return undefined;
  }
  const userId = await signIn(c);
  const requestId = await purchaseIdOf(goodsId, userId, key);
  const ids = clientKeys(c.get('clientIp'), userId, 'purchase', c.get('limits')).map((k) => k.id);
  return answerFromCopies(c, ids, (goods) => keyedRefusalBeforeBody(goods, requestId, Date.now()));
}

// Both check the raw header: a keyed retry may be owed the answer the object gave it before.
function refuseFromPath(c: Context<AppEnv>): Promise<Response | undefined> | undefined {
  const named = goodsOfPurchasePath(c.req.param('path') ?? '');
  if (named === undefined) {
    return undefined;
  }
  c.set('goodsId', named);
  const key = c.req.header('idempotency-key');
  return key === undefined ? refuseUnkeyed(c) : refuseKeyedEarly(c, key);
}

function refuseFromCache(c: Context<AppEnv>): Promise<Response | undefined> | undefined {
  // A goods already read was named by the path and checked by refuseFromPath (once: the sold-out
  // check may take the isolate's turn to ask the object).
  if (c.get('goods') === undefined && c.req.header('idempotency-key') === undefined) {
    return refuseUnkeyed(c);
  }
  return undefined;
}

async function shopperAuth(c: Context<AppEnv>): Promise<void> {
  c.set('userId', await signIn(c));
}

const purchasePath = validStep('param', PurchasePathParam, (c, { path }) => c.set('purchasePath', path), purchasePathFast);

const idempotencyKey = validStep(
  'header',
  IdempotencyHeader,
  (c, headers) => c.set('idempotencyKey', headers['idempotency-key']),
  idempotencyHeaderFast,
);

async function purchaseRequest(c: Context<AppEnv>): Promise<void> {
  c.set('purchaseId', await purchaseIdOf(c.get('goodsId'), c.get('userId'), c.get('idempotencyKey')));
}

function refuseKeyed(c: Context<AppEnv>): Promise<Response | undefined> | undefined {
  if (c.get('idempotencyKey') === undefined) {
    return undefined;
  }
  const keyed = { requestId: c.get('purchaseId'), tokenExpiresAt: claimedPurchaseExpiry(c.get('purchaseToken')) };
  const ids = clientKeys(c.get('clientIp'), c.get('userId'), 'purchase', c.get('limits')).map((k) => k.id);
  return answerFromCopies(c, ids, (goods) => keyedRefusalFromCopies(goods, keyed, Date.now()));
}

const saleLimits = (c: Context<AppEnv>) => admitSale(c, 'purchase');

async function loadGoods(c: Context<AppEnv>): Promise<void> {
  await goodsOf(c);
}

async function verifyToken(c: Context<AppEnv>): Promise<void> {
  const config = c.get('config'),
    goods = c.get('goods'),
    userId = c.get('userId'),
    key = c.get('idempotencyKey');
  const keyed = key !== undefined;
  const input = { token: c.get('purchaseToken'), path: c.get('purchasePath'), userId, goodsId: goods.id, keyed };
  c.set('verified', await checkPurchaseToken(config.tokenSecret, input, Date.now()));
}

/** inFlightCap: the isolate's place among those waiting on the goods' object, held until the object answers. */
async function inFlightCap(c: Context<AppEnv>): Promise<Response> {
  const leave = enterInFlight(c.get('goods').id, c.get('limits').inFlightPerGoods);
  try {
    await admission(c);
    return await reserveUnit(c);
  } finally {
    leave();
  }
}

async function admission(c: Context<AppEnv>): Promise<void> {
  const goods = c.get('goods'),
    limits = c.get('limits');
  try {
    await acquirePermit(c.env, goods, admissionRate(limits, goods.id), waitUntilOf(c));
  } catch (error) {
    throw busy(c.get('traceId'), c.get('purchaseId'), goods.id, error);
  }
}

async function reserveUnit(c: Context<AppEnv>): Promise<Response> {
  const goods = c.get('goods'),
    userId = c.get('userId'),
    verified = c.get('verified'),
    purchaseId = c.get('purchaseId'),
    key = c.get('idempotencyKey');
  const item = {
    requestId: purchaseId,
    userId,
    tokenId: verified.tokenId,
    tokenExpiresAt: verified.expiresAt,
    keyed: key !== undefined,
    ...(c.get('quantity') !== 1 ? { quantity: c.get('quantity') } : {}),
    ...(verified.admitted ? { admitted: true as const } : {}),
  };
  let outcome: ReserveOutcome;
  try {
    outcome = await reserve(c.env, goods, item, waitUntilOf(c));
  } catch (error) {
    throw busy(c.get('traceId'), purchaseId, goods.id, error);
  }
  if (key !== undefined && replayedToRetries(outcome)) {
    // Its retries may be owed this answer: let them past the fast path while they can come.
    rememberKeyedAnswer(purchaseId, verified.expiresAt + KEYED_GRACE_MS);
  }
  if (!outcome.ok) {
    // Fewer units left than asked for is not sold out: others may still buy what is left; nor
    // is a stock shard's refusal of several units (its count of the goods' units misses those
    // moving between shards). A replayed SOLD_OUT is the key's old answer, not the stock now.
    const uncertain = c.get('quantity') > 1 && goods.shards > 1;
    if (outcome.reason === 'SOLD_OUT' && outcome.replay) {
      recheckSoldOut(goods.id);
    } else if (outcome.reason === 'SOLD_OUT' && !outcome.remaining && !uncertain) {
      markSoldOut(goods.id, Date.now(), acceptedKeyedOf(outcome));
    }
    throw refusal(outcome.reason, outcome.remaining);
  }
  if (!outcome.replay) {
    markInStock(goods.id);
  }
  return c.json({ code: 0, message: 'queued', requestId: purchaseId }, 202);
}

/**
 * The object is overloaded, restarting or unreachable: answer at once rather than queue. A retry
 * with the same Idempotency-Key gets whatever it decided, if it decided anything.
 */
function busy(traceId: string, purchaseId: string, goodsId: number, error: unknown): AppError {
  if (error instanceof AppError) {
    return error;
  }
  const overloaded = typeof error === 'object' && error !== null && 'overloaded' in error && error.overloaded === true;
  log.warn('purchase.reserve_failed', { requestId: traceId, purchaseId, goodsId, overloaded, error });
  return new AppError('BUSY', undefined, { 'retry-after': '1' });
}

/** The checks before the object, in the order they run (inFlightCap, admission and reserveUnit follow). */
const CHECKS: readonly Check[] = [
  requireJsonMedia,
  refuseFromPath,
  purchaseBody,
  refuseFromCache,
  shopperAuth,
  purchasePath,
  idempotencyKey,
  purchaseRequest,
  refuseKeyed,
  saleLimits,
  loadGoods,
  withinLimit,
  verifyToken,
];

/** The purchase route: its checks, then the object. */
export const purchase = new Hono<AppEnv>().post('/do/:path', async function purchaseRoute(c) {
  for (const check of CHECKS) {
    const outcome = check(c);
    const answer = outcome instanceof Promise ? await outcome : outcome;
    if (answer instanceof Response) {
      return answer;
    }
  }
  return inFlightCap(c);
});
