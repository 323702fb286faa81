import { createMiddleware } from 'hono/factory';
import { lineIsOn, requirePass } from '../../edge/waiting-room';
import { type AppEnv, waitUntilOf } from '../context';

/** The header an admitted shopper sends its admission pass in. */
export const PASS_HEADER = 'x-admission-pass';

/**
 * While the goods' waiting room holds a line, a purchase token is only for an admitted shopper:
 * 403 NOT_ADMITTED without a valid admission pass (checked here, with no object call). Needs the
 * shopper and the goods (after shopperAuth and loadGoods). A shopper let in so gets a token that
 * says so (`admitted`), and their order is counted as one of the room's (see heardLate).
 */
export const requireAdmission = createMiddleware<AppEnv>(async function requireAdmission(c, next) {
  const config = c.get('config'),
    goods = c.get('goods'),
    userId = c.get('userId');
  const now = Date.now();
  if (await lineIsOn(c.env, goods, now, waitUntilOf(c))) {
    await requirePass(config, c.req.header(PASS_HEADER), userId, goods.id, now);
    c.set('admitted', true);
  }
  await next();
});
