import { Hono } from 'hono';
import { goodsStock, stockShardOf } from '../../../durable-objects/routing';
import { objectCall } from '../../edge/object-unavailable';
import { knownResult, rememberResult } from '../../edge/result-cache';
import { mirroredResult } from '../../edge/stock-reads';
import { AppError } from '../../kernel/errors';
import { RequestParam, ResultQuery } from '../../kernel/http-bodies';
import type { AppEnv } from '../context';
import { loadGoods } from '../middleware/goods';
import { shopperAuth } from '../middleware/shopper-auth';
import { valid, validInto } from '../middleware/validate';

/** A request id names its goods (`<goodsId>.<random>`), so the answer is found in that goods' object. */
const goodsOfRequest = validInto('param', RequestParam, (c, { requestId }) =>
  c.set('goodsId', Number(requestId.slice(0, requestId.indexOf('.')))),
);

/**
 * A purchase's answer, for its owner only: a final answer this isolate read before, else the
 * mirror, else the goods' object (the shopper's own stock shard: only the owner's answer is
 * ever shown). `?wait=N` lets the object hold a QUEUED answer up to N seconds until it is final,
 * one call for the whole wait instead of a poll a second; the mirror's QUEUED is answered at
 * once (a read there costs no object), and the page paces its next poll.
 */
export const result = new Hono<AppEnv>().get(
  '/result/:requestId',
  shopperAuth,
  goodsOfRequest,
  valid('query', ResultQuery),
  loadGoods,
  async (c) => {
    const requestId = c.req.param('requestId');
    const { wait } = c.req.valid('query');
    if (wait > 0) {
      c.set('heldRead', true);
    }
    const view =
      knownResult(requestId) ??
      (await mirroredResult(c.get('config'), requestId)) ??
      (await objectCall(
        'result.read_failed',
        { goodsId: c.get('goods').id, requestId },
        "the purchase's result cannot be read right now, please retry",
        () =>
          goodsStock(c.env, c.get('goods'), stockShardOf(c.get('goods'), c.get('userId'))).result(
            requestId,
            wait > 0 ? { ms: wait * 1000, userId: c.get('userId') } : undefined,
          ),
      ));
    if (view) {
      rememberResult(view);
    }
    // Someone else's request is reported as unknown, so ids cannot be probed.
    if (!view || view.userId !== c.get('userId')) {
      throw new AppError('NOT_FOUND', 'no such request');
    }
    return c.json({
      requestId: view.requestId,
      status: view.status,
      ...(view.orderId ? { orderId: view.orderId } : {}),
      ...(view.reason ? { reason: view.reason } : {}),
    });
  },
);
