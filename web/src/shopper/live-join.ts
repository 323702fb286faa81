import { LIVE_PROTOCOL, type LineDeps, type SocketLike, TicketAnswer } from './waiting-line';

// Joining the waiting room as the live channel opens (GET .../live?join=1): one request to the
// shopper's room shard where POST .../queue and then a connection are two. The open socket is
// handed to the WaitingLine (waiting-line.ts), which follows it from there.

/** The address of a live channel that joins the line as it opens (the JWT goes as a subprotocol). */
export function joinUrl(origin: string, goodsId: number): string {
  const url = new URL(`/api/seckill/goods/${goodsId}/live`, origin);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('join', '1');
  return url.toString();
}

/** How long the page waits for a joining channel's answer before it joins with POST .../queue instead. */
export const JOIN_LIVE_TIMEOUT_MS = 5_000;

/**
 * Joins the line as the live channel opens (GET .../live?join=1): one request to the shopper's
 * shard where the join route and then a connection are two. Resolves with the join's answer (the
 * channel's first event, `joined`) and the open socket, for WaitingLine.start; undefined when the
 * channel closed, failed or said nothing usable within `timeoutMs`: a browser is not told why an
 * upgrade was refused, so the page then joins with POST .../queue, which says.
 */
export function joinThroughLive(
  deps: Pick<LineDeps, 'openSocket' | 'setTimer' | 'clearTimer'>,
  url: string,
  jwt: string,
  timeoutMs = JOIN_LIVE_TIMEOUT_MS,
): Promise<{ answer: TicketAnswer; socket: SocketLike } | undefined> {
  return new Promise((resolve) => {
    let socket: SocketLike;
    try {
      socket = deps.openSocket(url, [LIVE_PROTOCOL, `jwt.${jwt}`]);
    } catch {
      resolve(undefined);
      return;
    }
    let settled = false;
    const done = (answer: TicketAnswer | undefined) => {
      if (settled) {
        return;
      }
      settled = true;
      deps.clearTimer(timer);
      socket.onmessage = null;
      socket.onclose = null;
      socket.onerror = null;
      if (answer) {
        resolve({ answer, socket });
      } else {
        socket.close();
        resolve(undefined);
      }
    };
    const timer = deps.setTimer(() => done(undefined), timeoutMs);
    socket.onmessage = (event) => {
      let json: unknown;
      try {
        json = typeof event.data === 'string' ? JSON.parse(event.data) : undefined;
      } catch {
        json = undefined;
      }
      const parsed = TicketAnswer.safeParse(json);
      done(parsed.success && (json as { type?: unknown }).type === 'joined' ? parsed.data : undefined);
    };
    socket.onclose = () => done(undefined);
    socket.onerror = () => {
      // A close follows.
    };
  });
}
