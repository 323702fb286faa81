import { Hono } from 'hono';
import { createMiddleware } from 'hono/factory';
import { withDbFor } from '../../../db/client';
import { type DeadLetterRow, listDeadLetters } from '../../../db/dead-letters';
import { AppError, type ErrorCode, unavailable } from '../../kernel/errors';
import { DeadLetterParam, DeadLetterQuery, RedriveGoodsBody } from '../../kernel/http-bodies';
import { type RedriveResult, redriveDeadLetter } from '../../queue/dead-letters';
import type { AppEnv } from '../context';
import { adminAuth } from '../middleware/admin-auth';
import { valid } from '../middleware/validate';
import { notFound } from '../on-error';

/** A goods' re-drive-all sends at most this many messages per call. */
const REDRIVE_ALL_LIMIT = 500;

const REFUSAL: Record<Exclude<RedriveResult, { ok: true }>['reason'], { code: ErrorCode; message: string }> = {
  NOT_FOUND: { code: 'NOT_FOUND', message: 'no such dead letter' },
  ALREADY_REDRIVEN: { code: 'CONFLICT', message: 'the dead letter was already re-driven' },
  UNROUTABLE: { code: 'CONFLICT', message: 'the message names no queue this Worker consumes; it cannot be re-driven' },
  MALFORMED: { code: 'CONFLICT', message: "the message does not match its queue's format; it cannot be re-driven" },
  SEND_FAILED: { code: 'UNAVAILABLE', message: 'the queue refused the message; try again' },
};

function view(row: DeadLetterRow) {
  return {
    id: row.id,
    queue: row.queue,
    messageKey: row.messageKey,
    goodsId: row.goodsId,
    attempts: row.attempts,
    body: row.body,
    createdAt: row.createdAt.toISOString(),
    redrivenAt: row.redrivenAt?.toISOString() ?? null,
  };
}

/** Lets through only POST /redrive; any other /:id is the app's 404 for no route. */
const bulkRedrive = createMiddleware<AppEnv>(async (c, next) => {
  if (c.req.param('id') !== 'redrive') {
    return notFound(c);
  }
  await next();
});

/** Operators' view of messages that exhausted their retries, and the way to send them again. */
export const adminDeadLetters = new Hono<AppEnv>()
  .use(adminAuth)

  .get('/', valid('query', DeadLetterQuery), async (c) => {
    const rows = await withDbFor(c.get('config'), (d) => listDeadLetters(d, c.req.valid('query')));
    return c.json(rows.map(view));
  })

  // POST /redrive, written as a parameter: the app's router (RegExpRouter, app.ts) cannot hold a
  // fixed segment beside the parameter of /:id/redrive.
  .post('/:id', bulkRedrive, valid('json', RedriveGoodsBody), async (c) => {
    const { goodsId } = c.req.valid('json');
    const results = await withDbFor(c.get('config'), async (d) => {
      const open = await listDeadLetters(d, { goodsId, state: 'open', limit: REDRIVE_ALL_LIMIT });
      const out: RedriveResult[] = [];
      for (const row of open) {
        out.push(await redriveDeadLetter(c.env, d, row.id));
      }
      return out;
    });
    return c.json({
      goodsId,
      redriven: results.filter((r) => r.ok).length,
      skipped: results.flatMap((r) => (r.ok ? [] : [{ id: r.id, reason: r.reason }])),
    });
  })

  .post('/:id/redrive', valid('param', DeadLetterParam), async (c) => {
    const { id } = c.req.valid('param');
    const result = await withDbFor(c.get('config'), (d) => redriveDeadLetter(c.env, d, id));
    if (!result.ok) {
      const refusal = REFUSAL[result.reason];
      // A queue that refused the send is an outage: asked again in a second.
      throw refusal.code === 'UNAVAILABLE' ? unavailable(refusal.message) : new AppError(refusal.code, refusal.message);
    }
    return c.json({ id, queue: result.queue, redriven: true });
  });
