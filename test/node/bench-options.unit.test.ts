// The bench's command line (scripts/lib/bench/options.ts): what it refuses before starting
// anything, with a message that says what to change.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkOpenFiles, openFileLimit, parseBenchOptions } from '../../scripts/lib/bench/options.ts';

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            20000                65536                files
Max locked memory         8388608              8388608              bytes
`;

describe('the open-file check of the queue phase', () => {
  it('reads the soft limit, and nothing from an unlimited or unreadable one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bench-limits-'));
    try {
      await writeFile(join(dir, 'limits'), LIMITS);
      expect(openFileLimit(join(dir, 'limits'))).toBe(20_000);
      await writeFile(join(dir, 'unlimited'), LIMITS.replace('20000                65536', 'unlimited            unlimited'));
      expect(openFileLimit(join(dir, 'unlimited'))).toBeUndefined();
      expect(openFileLimit(join(dir, 'missing'))).toBeUndefined();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a line with more live channels than the limit holds, and says what would fit', () => {
    // 20,000 shoppers beside 100 connections made workerd abort on accept() at a limit of 20,000.
    expect(() => checkOpenFiles({ queueShoppers: 20_000, connections: 100 }, 20_000)).toThrow(
      /about 21100 open files.*allows 20000.*ulimit -n 21504.*--queue-shoppers 18900 or fewer/,
    );
    expect(() => checkOpenFiles({ queueShoppers: 18_900, connections: 100 }, 20_000)).not.toThrow();
    expect(() => checkOpenFiles({ queueShoppers: 100_000, connections: 100 }, undefined)).not.toThrow();
    // No queue phase, no live connections: nothing to refuse, even under the common limit of 1,024.
    expect(() => checkOpenFiles({ queueShoppers: 0, connections: 100 }, 1_024)).not.toThrow();
  });

  it('refuses more held result reads than the limit holds, apart from the live channels of the other phase', () => {
    expect(() => checkOpenFiles({ queueShoppers: 0, heldReads: 20_000, connections: 100 }, 20_000)).toThrow(
      /--held-reads 20000 holds that many held result reads.*about 21100 open files.*--held-reads 18900 or fewer/,
    );
    // The two phases run one after the other: each needs its own sockets, not their sum.
    expect(() => checkOpenFiles({ queueShoppers: 18_900, heldReads: 18_900, connections: 100 }, 20_000)).not.toThrow();
    const held = (args: string[]) => {
      const parsed = parseBenchOptions(args);
      return 'heldReads' in parsed ? parsed.heldReads : 'help';
    };
    expect(held([])).toBe(5_000);
    expect(held(['--held-reads', '0'])).toBe(0);
    expect(() => held(['--held-reads', '-1'])).toThrow(/held-reads/);
  });

  it('takes the default phase on this machine', () => {
    expect(parseBenchOptions([]).help).toBeUndefined();
  });

  it("keeps the objects' storage off the disk unless asked", () => {
    const onDisk = (args: string[]) => {
      const parsed = parseBenchOptions(args);
      return 'objectsOnDisk' in parsed ? parsed.objectsOnDisk : 'help';
    };
    expect(onDisk([])).toBe(false);
    expect(onDisk(['--objects-on-disk'])).toBe(true);
  });

  it("takes the room's shard count within what a goods takes, and leaves it to the goods otherwise", () => {
    const o = (args: string[]) => {
      const parsed = parseBenchOptions(['--queue-shoppers', '100', ...args]);
      return 'roomShards' in parsed ? parsed.roomShards : 'help';
    };
    expect(o([])).toBeUndefined();
    expect(o(['--room-shards', '4'])).toBe(4);
    expect(() => o(['--room-shards', '0'])).toThrow(/room-shards/);
    expect(() => o(['--room-shards', '129'])).toThrow(/room-shards/);
  });

  it("takes the room's goods' stock shards within what a goods takes, one by default", () => {
    const o = (args: string[]) => {
      const parsed = parseBenchOptions(['--queue-shoppers', '100', ...args]);
      return 'queueStockShards' in parsed ? parsed.queueStockShards : 'help';
    };
    expect(o([])).toBe(1);
    expect(o(['--queue-stock-shards', '8'])).toBe(8);
    expect(() => o(['--queue-stock-shards', '0'])).toThrow(/queue-stock-shards/);
    expect(() => o(['--queue-stock-shards', '65'])).toThrow(/queue-stock-shards/);
  });

  const limit = openFileLimit();
  it.skipIf(limit === undefined || limit >= 101_100)("refuses the largest line before starting anything, under this shell's limit", () => {
    expect(() => parseBenchOptions(['--queue-shoppers', '100000'])).toThrow(/ulimit -n/);
  });
});
