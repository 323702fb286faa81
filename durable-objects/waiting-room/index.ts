import { DurableObject } from 'cloudflare:workers';
import { resetIfAsked, resetName } from '../../workers/kernel/dev-faults';
import type {
  HubReply,
  JoinOutcome,
  RoomGoods,
  RoomStats,
  ShardReport,
  ShopperResult,
  TicketView,
} from '../../workers/kernel/waiting-room';
import { ROOM_SHARDS, RoomGoods as RoomGoodsSchema } from '../../workers/kernel/waiting-room';
import { roomHub } from '../routing';
import { RoomHub } from './hub';
import { FAIRNESS_RULE } from './rules';
import { ShardRoom } from './shard';
import { RoomStorage } from './storage';

export type Fairness = { seedHash: string; seed?: string; rule?: string };

/**
 * A goods' waiting room (see docs/waiting-room.md). One class, two roles picked by the name
 * the routing module gives an instance: `room:{goods}:{n}` is shard n, which shoppers talk to
 * (join, status, the live channel) and the order consumer tells of settled purchases;
 * `room:{goods}:hub` is the coordinator, which only the shards (and the stats) call. Each role's
 * state is built on its first call, so an instance only ever loads its own tables.
 */
export class WaitingRoom extends DurableObject<Env> {
  private readonly store: RoomStorage;
  private shardRole: ShardRoom | undefined;
  private hubRole: RoomHub | undefined;
  private seedHash: string | undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new RoomStorage(ctx.storage.sql);
    void ctx.blockConcurrencyWhile(async () => {
      this.store.migrate();
    });
    // Keep-alives are answered by the runtime without waking a hibernated shard.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair('{"type":"ping"}', '{"type":"pong"}'));
  }

  private shard(goods?: RoomGoods, index?: number): ShardRoom {
    this.shardRole ??= new ShardRoom(this.ctx, this.env, this.store);
    if (goods && index !== undefined) {
      // An edge of an earlier build sends no shard count: it routes over ROOM_SHARDS.
      goods.shards ??= ROOM_SHARDS;
      this.shardRole.see(goods, index);
      this.shardRole.catchUp(Date.now());
    }
    return this.shardRole;
  }

  /** Dev builds: this instance goes when a reset was asked for this shard or the coordinator (dev-faults.ts). */
  private devReset(goods: RoomGoods, role: { room: number | 'hub' }): void {
    if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) {
      resetIfAsked(this.ctx, resetName(goods.goodsId, role));
    }
  }

  private hub(): RoomHub {
    this.hubRole ??= new RoomHub(this.env, this.store);
    return this.hubRole;
  }

  // The shard role.

  /** Joins the line; idempotent per shopper. */
  async join(goods: RoomGoods, shard: number, userId: string): Promise<JoinOutcome> {
    this.devReset(goods, { room: shard });
    return this.shard(goods, shard).join(goods, userId);
  }

  /** New settings from the operator (pause, resume, PUT): the next report carries them to the coordinator. */
  async configure(goods: RoomGoods, shard: number): Promise<void> {
    this.devReset(goods, { room: shard });
    this.shard(goods, shard).schedule(Date.now() + 50);
  }

  /** A shopper's ticket (undefined when the id is not theirs). */
  async status(goods: RoomGoods, shard: number, userId: string, ticketId: string): Promise<TicketView | undefined> {
    this.devReset(goods, { room: shard });
    return this.shard(goods, shard).status(userId, ticketId);
  }

  /** Demand seen by an isolate's token route (`auto`); answers whether the room holds a line. */
  async noteArrivals(goods: RoomGoods, shard: number, n: number): Promise<{ active: boolean }> {
    return this.shard(goods, shard).noteArrivals(goods, n);
  }

  /** Settled purchases, one call per consumer batch and shard: pushed to the shoppers' connections. */
  async results(list: ShopperResult[]): Promise<number> {
    return this.shard().deliver(list);
  }

  /** The pre-queue commitment (and the seed after the start), asked of the coordinator once and kept. */
  async fairness(goods: RoomGoods, shard: number): Promise<Fairness> {
    this.shard(goods, shard);
    const now = Date.now();
    if (this.seedHash !== undefined && now < goods.startAt) {
      return { seedHash: this.seedHash };
    }
    const info = await roomHub(this.env, { id: goods.goodsId, locationHint: goods.locationHint }).seedInfo(goods);
    this.seedHash = info.seedHash;
    return info.seed ? { ...info, rule: FAIRNESS_RULE } : { seedHash: info.seedHash };
  }

  /**
   * The live channel's WebSocket upgrade, the one request this object takes over fetch (an RPC
   * cannot hand back a socket). The edge has authenticated the shopper and names them in
   * `x-room-user`, the goods in `x-room-goods` and the shard in `x-room-shard`; a channel that
   * joins the line as it opens says `x-room-join: 1` (or, on a goods without a line, carries the
   * edge's join answer in `x-room-joined`).
   */
  async fetch(request: Request): Promise<Response> {
    const goods = RoomGoodsSchema.safeParse(safeJson(request.headers.get('x-room-goods')));
    const shard = Number(request.headers.get('x-room-shard'));
    if (request.headers.get('upgrade')?.toLowerCase() !== 'websocket' || !goods.success || !Number.isInteger(shard)) {
      return new Response('expected a WebSocket upgrade from the edge', { status: 400 });
    }
    return this.shard(goods.data, shard).connect(request, goods.data, safeJson(request.headers.get('x-room-joined')));
  }

  async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    await this.shard().message(ws, message);
  }

  async webSocketClose(ws: WebSocket, code: number, _reason: string, _wasClean: boolean): Promise<void> {
    try {
      ws.close(code === 1005 || code === 1006 ? 1000 : code, 'closed');
    } catch {
      // Already closed on our side.
    }
  }

  async alarm(): Promise<void> {
    await this.shard().tick();
  }

  // The coordinator role.

  /** A shard's report; the answer carries the rounds it has not heard of, the line and the marks. */
  async report(report: ShardReport): Promise<HubReply> {
    return this.hub().report(report);
  }

  async seedInfo(goods: RoomGoods): Promise<{ seedHash: string; seed?: string }> {
    return this.hub().seedInfo(goods);
  }

  async roomStats(goods: RoomGoods): Promise<RoomStats> {
    this.devReset(goods, { room: 'hub' });
    return this.hub().stats(goods);
  }
}

function safeJson(text: string | null): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}
