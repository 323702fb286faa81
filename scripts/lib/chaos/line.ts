// A shopper's wait in a phase's waiting room, as the shopper page waits: it joins as the live
// channel opens (GET .../live?join=1), or with POST .../queue when that channel fails, and then
// follows its place with the page's own WaitingLine (web/src/shopper/waiting-line.ts) over that
// channel. A channel that drops under it (its room shard reset) is opened again with the page's
// backoff, and the ticket is polled only while it is down. The counts say how many channels the
// faults dropped, how many came back, and how each shopper heard the end of its wait.

import WebSocket from 'ws';
import { Result } from '../../../web/src/shared/contract.ts';
import { joinThroughLive, joinUrl } from '../../../web/src/shopper/live-join.ts';
import {
  type LineDeps,
  type LineView,
  liveUrl,
  type SocketLike,
  TicketAnswer,
  WaitingLine,
} from '../../../web/src/shopper/waiting-line.ts';
import type { Answer, HttpClient } from '../load/http-client.ts';

/** How a phase's shoppers waited in line (live channels, their drops, and how the wait ended). */
export type LineCounts = {
  /** Shoppers who joined as the live channel opened, and those who joined with POST .../queue after it failed. */
  joinedLive: number;
  joinedPost: number;
  /** Channels that opened (joins and reopenings); those that closed under a shopper still waiting, and those opened again after such a drop. */
  opened: number;
  dropped: number;
  reopened: number;
  /**
   * The longest a waiting shopper was without its channel: from a drop until it opened again or
   * the wait ended. The page opens it again within a second or two; a wait that ended only by
   * the fallback poll (every FALLBACK_POLL_MS) took at least that long.
   */
  longestDownMs: number;
  /** Shoppers whose wait ended (let in, sold out, lapsed) as the channel told them, or as a poll did while it was down. */
  heardLive: number;
  heardPolled: number;
  /** Shoppers still waiting when their patience ran out. */
  gaveUp: number;
};

export function lineCounts(): LineCounts {
  return { joinedLive: 0, joinedPost: 0, opened: 0, dropped: 0, reopened: 0, longestDownMs: 0, heardLive: 0, heardPolled: 0, gaveUp: 0 };
}

export type LineContext = {
  http: HttpClient;
  goodsId: number;
  counts: LineCounts;
  /** Counts an HTTP answer the wait got (the POST join, a poll of the ticket or a result). */
  record(what: string, answer: Answer): void;
  patienceMs: number;
};

/**
 * Waits in the goods' line as the page does; the view the wait ended with (ADMITTED with its
 * pass, SOLD_OUT, EXPIRED, or still WAITING when patience ran out), or undefined when the shopper
 * could not join at all. `joinByPost` is the page's POST .../queue (with its retries).
 */
export async function waitAsThePage(
  c: LineContext,
  shopper: { jwt: string; ip: string },
  joinByPost: () => Promise<TicketAnswer | undefined>,
): Promise<LineView | undefined> {
  const channel: Channel = { waiting: true, downSince: undefined };
  const deps = lineDeps(c, shopper, channel);
  const joined = await joinThroughLive(deps, joinUrl(c.http.url, c.goodsId), shopper.jwt);
  const first = joined?.answer ?? (await joinByPost());
  if (!first) {
    channel.waiting = false;
    return undefined;
  }
  if (joined) {
    c.counts.joinedLive++;
  } else {
    c.counts.joinedPost++;
  }
  let ended: (view: LineView) => void = () => {};
  const end = new Promise<LineView>((resolve) => {
    ended = resolve;
  });
  const line = new WaitingLine(
    deps,
    (ticket) => liveUrl(c.http.url, c.goodsId, ticket),
    first.ticket,
    first,
    (view) => {
      if (view.state !== 'WAITING') {
        ended(view);
      }
    },
  );
  line.start(joined?.socket);
  const patience = setTimeout(() => ended(line.state), c.patienceMs);
  const view = first.state !== 'WAITING' ? line.state : await end;
  clearTimeout(patience);
  channel.waiting = false;
  if (channel.downSince !== undefined) {
    c.counts.longestDownMs = Math.max(c.counts.longestDownMs, Date.now() - channel.downSince);
  }
  line.stop();
  // An end told with the join itself was heard the way the shopper joined.
  const live = first.state !== 'WAITING' ? joined !== undefined : view.connected;
  if (view.state === 'WAITING') {
    c.counts.gaveUp++;
  } else if (live) {
    c.counts.heardLive++;
  } else {
    c.counts.heardPolled++;
  }
  return view;
}

/** A shopper's channel as the counts follow it: whether it still waits, and since when its channel is down. */
type Channel = { waiting: boolean; downSince: number | undefined };

/** The page's dependencies in Node: `ws` sockets carrying the shopper's address, the chaos HTTP client, Node's timers. */
function lineDeps(c: LineContext, shopper: { jwt: string; ip: string }, channel: Channel): LineDeps {
  const headers = { 'cf-connecting-ip': shopper.ip };
  return {
    openSocket(url, protocols) {
      const socket = new WebSocket(url, protocols, { headers });
      // A socket closed before it opened emits an error; the page's handlers may be detached by then.
      socket.on('error', () => {});
      let open = false;
      socket.on('open', () => {
        open = true;
        c.counts.opened++;
        if (channel.downSince !== undefined) {
          c.counts.reopened++;
          c.counts.longestDownMs = Math.max(c.counts.longestDownMs, Date.now() - channel.downSince);
          channel.downSince = undefined;
        }
      });
      socket.on('close', () => {
        if (open && channel.waiting) {
          c.counts.dropped++;
          channel.downSince ??= Date.now();
        }
      });
      return socket as unknown as SocketLike;
    },
    async fetchTicket(ticket) {
      const answer = await c.http.get(`/api/seckill/goods/${c.goodsId}/queue/${encodeURIComponent(ticket)}`, { headers });
      c.record('ticket (channel down)', answer);
      const parsed = TicketAnswer.safeParse(answer.json);
      return answer.status === 200 && parsed.success ? parsed.data : undefined;
    },
    async fetchResult(requestId) {
      const answer = await c.http.get(`/api/seckill/result/${encodeURIComponent(requestId)}`, {
        headers: { ...headers, authorization: `Bearer ${shopper.jwt}` },
      });
      c.record('result (channel down)', answer);
      const parsed = Result.safeParse(answer.json);
      return answer.status === 200 && parsed.success ? parsed.data : undefined;
    },
    setTimer: (fn, ms) => setTimeout(fn, ms),
    clearTimer: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout> | undefined),
    random: Math.random,
  };
}
