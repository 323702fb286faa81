import { Hono } from 'hono';
import { verifyShopperToken } from '../../edge/shopper-jwt';
import { connectLive, ticketOwner } from '../../edge/waiting-room';
import { UserId } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import type { AppEnv } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';

/** A browser cannot set Authorization on a WebSocket: it offers the JWT as a subprotocol `jwt.<token>`. */
const JWT_PROTOCOL = 'jwt.';

/**
 * GET .../live: the shopper's WebSocket to their room shard (hibernating, so an idle connection
 * costs nothing). Authenticated by the signed ticket (`?ticket=`) or the shopper's JWT in
 * Sec-WebSocket-Protocol; it carries position, admitted, sold_out and result events, and works
 * for results when the goods has no waiting room too.
 */
export const live = new Hono<AppEnv>().get('/goods/:goodsId/live', goodsInPath, loadGoods, async (c) => {
  if (c.req.header('upgrade')?.toLowerCase() !== 'websocket') {
    throw new AppError('INVALID_INPUT', 'GET .../live is a WebSocket: connect with Upgrade: websocket');
  }
  const config = c.get('config'),
    goods = c.get('goods');
  const ticket = c.req.query('ticket');
  let userId: string;
  if (ticket) {
    userId = await ticketOwner(config, goods, ticket);
  } else {
    const offered = (c.req.header('sec-websocket-protocol') ?? '').split(',').map((p) => p.trim());
    const jwt = offered.find((p) => p.startsWith(JWT_PROTOCOL))?.slice(JWT_PROTOCOL.length);
    if (!jwt) {
      throw new AppError('UNAUTHENTICATED', 'send ?ticket=<ticket>, or the JWT as the subprotocol jwt.<token>');
    }
    let sub: unknown;
    try {
      sub = (await verifyShopperToken(jwt, config.shopperAuth)).sub;
    } catch (error) {
      throw error instanceof AppError ? error : new AppError('UNAUTHENTICATED', 'the token is invalid or expired');
    }
    const parsed = UserId.safeParse(sub);
    if (!parsed.success) {
      throw new AppError('UNAUTHENTICATED', 'the token has no usable subject');
    }
    userId = parsed.data;
  }
  return connectLive(c.env, goods, userId, c.req.raw);
});
