import { Hono } from 'hono';
import { z } from 'zod';
import { joinRoom, ticketStatus } from '../../edge/waiting-room';
import { type AppEnv, waitUntilOf } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';
import { shopperAuth } from '../middleware/shopper-auth';
import { valid } from '../middleware/validate';

/** A signed ticket, as POST .../queue hands it out. */
const TicketParam = z.object({
  ticket: z
    .string()
    .min(16)
    .max(512)
    .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'not a ticket'),
});

/**
 * The waiting room: join it (the same ticket however often a shopper asks), and read a ticket's
 * place for clients without the live channel. Each call reaches only the shopper's own shard.
 */
export const queue = new Hono<AppEnv>()
  .post('/goods/:goodsId/queue', shopperAuth, goodsInPath, loadGoods, async (c) => {
    const config = c.get('config'),
      goods = c.get('goods'),
      userId = c.get('userId');
    return c.json(await joinRoom(c.env, config, goods, userId, waitUntilOf(c)));
  })

  .get('/goods/:goodsId/queue/:ticket', goodsInPath, valid('param', TicketParam), loadGoods, async (c) => {
    return c.json(await ticketStatus(c.env, c.get('config'), c.get('goods'), c.req.valid('param').ticket));
  });
