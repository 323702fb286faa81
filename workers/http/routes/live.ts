import { type Context, Hono } from 'hono';
import { verifyShopperToken } from '../../edge/shopper-jwt';
import { connectLive, joinLive, ticketOwner } from '../../edge/waiting-room';
import { UserId } from '../../kernel/contract';
import { AppError } from '../../kernel/errors';
import { type AppEnv, waitUntilOf } from '../context';
import { goodsInPath, loadGoods } from '../middleware/goods';

/** A browser cannot set Authorization on a WebSocket: it offers the JWT as a subprotocol `jwt.<token>`. */
const JWT_PROTOCOL = 'jwt.';

/** The shopper whose JWT the connection offers as a subprotocol. */
async function shopperOfProtocol(c: Context<AppEnv>): Promise<string> {
  const offered = (c.req.header('sec-websocket-protocol') ?? '').split(',').map((p) => p.trim());
  const jwt = offered.find((p) => p.startsWith(JWT_PROTOCOL))?.slice(JWT_PROTOCOL.length);
  if (!jwt) {
    throw new AppError('UNAUTHENTICATED', 'send ?ticket=<ticket>, or the JWT as the subprotocol jwt.<token>');
  }
  let sub: unknown;
  try {
    sub = (await verifyShopperToken(jwt, c.get('config').shopperAuth)).sub;
  } catch (error) {
    throw error instanceof AppError ? error : new AppError('UNAUTHENTICATED', 'the token is invalid or expired');
  }
  const parsed = UserId.safeParse(sub);
  if (!parsed.success) {
    throw new AppError('UNAUTHENTICATED', 'the token has no usable subject');
  }
  return parsed.data;
}

/**
 * GET .../live: the shopper's WebSocket to their room shard (hibernating, so an idle connection
 * costs nothing). Authenticated by the signed ticket (`?ticket=`) or the shopper's JWT in
 * Sec-WebSocket-Protocol; it carries position, admitted, sold_out and result events, and works
 * for results when the goods has no waiting room too. With `?join=1` (and the JWT) it joins the
 * line as it opens, one request to the shard where POST .../queue and a connection are two: the
 * first event is `joined`, the join's answer; refusals are the join route's, before the upgrade.
 */
export const live = new Hono<AppEnv>().get('/goods/:goodsId/live', goodsInPath, loadGoods, async (c) => {
  if (c.req.header('upgrade')?.toLowerCase() !== 'websocket') {
    throw new AppError('INVALID_INPUT', 'GET .../live is a WebSocket: connect with Upgrade: websocket');
  }
  const config = c.get('config'),
    goods = c.get('goods');
  const ticket = c.req.query('ticket');
  const join = c.req.query('join');
  if (join !== undefined) {
    if (join !== '1' || ticket !== undefined) {
      throw new AppError('INVALID_INPUT', 'join=1 joins the line with the JWT as the subprotocol jwt.<token>, and takes no ticket');
    }
    return joinLive(c.env, config, goods, await shopperOfProtocol(c), c.req.raw, waitUntilOf(c));
  }
  const userId = ticket ? await ticketOwner(config, goods, ticket) : await shopperOfProtocol(c);
  return connectLive(c.env, goods, userId, c.req.raw);
});
