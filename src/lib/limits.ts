/**
 * Every bound the broker enforces, with its unit in its name. Relations between them are checked
 * when this module loads, so an edit that breaks one fails at start-up, not in production.
 */
import { assert } from "./assert.ts";

const KiB = 1024;
const MiB = 1024 * KiB;

/** Bytes of a stored record after `record_len`, excluding key and value: offset 8 + timestamp 8 + key_len 4 + value_len 4 + crc 4. */
export const recordOverheadBytes = 28;
/** Bytes in front of every stored record: the u32 `record_len`. */
export const recordLengthPrefixBytes = 4;
/** Largest key + value of one record, in bytes. Larger records are refused before anything is allocated. */
export const recordPayloadBytesMax = 8 * MiB;
/**
 * Bytes a stored record adds to the producer's entry it encodes: `record_len` 4 + offset 8 + crc 4
 * (an entry is the middle of a stored record, docs/storage.md "Records"). A batch of n entries of b bytes is
 * b + 16 × n bytes in the log.
 */
export const recordOverEntryBytes = 16;
/** Largest plausible `record_len` (bytes that follow the length field). */
export const recordLenMax = recordOverheadBytes + recordPayloadBytesMax;
/** Smallest plausible `record_len`: a record with no key and an empty value. */
export const recordLenMin = recordOverheadBytes;

/** Bytes of one index entry: u64 offset within the segment, u64 file position. */
export const indexEntryBytes = 16;
/** Bytes of log between two index entries; a read scans at most this far past an entry (docs/storage.md "Index and reads"). */
export const indexIntervalBytes = 4 * KiB;
/**
 * Index entries an active segment keeps in memory before writing them to its index file (the
 * index is derived: recovery scans the active segment in full, and sealing writes the rest), so
 * most group commits are one write to the log and none to the index. 256 entries = 4 KiB of index.
 */
export const indexPendingEntriesMax = 256;
/**
 * Bytes of zeros the active segment writes ahead of its end (capped at `segment_bytes`). An
 * fdatasync after an append that grows the file must also commit the new file size to the
 * file system's journal; an append into zeros already on disk flushes only data (docs/storage.md,
 * Zeros written ahead). Recovery treats an all-zero tail as free space, not a torn write (zeros
 * never decode as a record: `record_len` 0 is below the minimum), and sealing cuts it.
 */
export const segmentPreallocateBytes = 1 * MiB;
/**
 * The fewest zeros written ahead at once: a segment writes ahead as many bytes as it holds, between
 * this and `segmentPreallocateBytes`, so a partition that has taken a few records holds 64 KiB of
 * zeros on disk rather than 1 MiB (1,000 quiet partitions: 64 MiB, not 1 GiB, each written and
 * fsynced once), while a busy one reaches 1 MiB steps after five growing writes.
 */
export const segmentPreallocateMinBytes = 64 * KiB;
/**
 * A file with at most this many bytes written since its last fsync is fsynced on the calling
 * thread (`fdatasyncSync`); more goes to the runtime's thread pool. A small fdatasync is short,
 * and handing it to a pool thread and back costs two context switches, about as much CPU again;
 * while it blocks, new requests queue in the kernel and become the next group commit, as in
 * Redis. A large one runs in the pool so encoding overlaps the disk, and so does every fsync after
 * the first of an event-loop turn, or while one is in the pool (many partitions at once:
 * `runtime/node-fs.ts`).
 */
export const inlineSyncBytesMax = 256 * KiB;
/**
 * The most bytes the runtime's file handles read synchronously in one event-loop turn
 * (docs/runtimes.md "File reads: synchronous within a budget per turn"): reads within it run on
 * the calling thread (page-cached bytes, cheapest there), a read that would pass it goes to the
 * thread pool, so that consumers pipelining large fetches cannot hold the loop (and every other
 * connection) for tens of milliseconds per turn. One consumer's fetch of ~300 KB a turn stays
 * synchronous; a read of the default 1 MiB `max_bytes` goes to the pool (one round trip to a pool
 * thread, small beside copying the MiB). Smaller is fairer: the listener accepts one connection
 * per turn, so a new connection waits about as many turns as connections are queued ahead of it.
 */
export const syncReadBytesPerTurn = 512 * KiB;
/**
 * The most file reads running in the runtime's thread pool at once (Node's pool has 4 threads by
 * default); more wait their turn, so that fsyncs and other pool work keep a free thread.
 */
export const poolReadsInFlightMax = 2;
/**
 * The most event-loop turns a partition's next fsync waits for requests still arriving
 * (docs/storage.md "Writes and durability", group commit): it waits only after an fsync that
 * answered several requests, one turn at a time, and only while each turn brings new ones, so
 * this bounds the delay when requests keep arriving (an open stream rather than answered
 * producers coming back).
 */
export const groupCommitGatherTurnsMax = 16;
/**
 * The shortest bound, in ms, of a partition's wait for the requests the last fsync answered to
 * come back before the next fsync starts (docs/storage.md "Writes and durability", "When the
 * next fsync starts"): a timer, so the wait blocks in the event loop's poll and ends as soon as
 * the requests waiting reach those expected. The bound is half the last fsync's duration, at least this (the shortest timer
 * Node keeps) and at most `groupCommitGatherWaitMaxMs`; a wait that runs out makes the next
 * fsyncs start without one (`groupCommitWaitBackoffMax`).
 */
export const groupCommitGatherWaitMs = 1;
/** The longest bound of that wait, in ms, however slow the last fsync was. */
export const groupCommitGatherWaitMaxMs = 10;
/**
 * After a timed gather wait ran out, how many fsync starts at most skip the timer (the skip
 * doubles with each wait that runs out in a row, from 1, and resets when one is met), so
 * producers that do not come back pay the wait at most once in this many fsyncs.
 */
export const groupCommitWaitBackoffMax = 64;

/**
 * Bytes of one positional read of a sequential scan (recovery, `es-broker check`, retention's and
 * compaction's passes over a sealed segment): one read per this many bytes of log. A record larger
 * than the window is read whole in a window of its own size.
 */
export const scanWindowBytes = 1 * MiB;

/** Largest bytes of entries the write loop coalesces into one write to the log (one group commit). */
export const groupEntryBytesMax = 8 * MiB;
/**
 * Largest append buffer (the encoded records of one group write) kept for reuse: a group of
 * `groupEntryBytesMax` entries plus 16 bytes a record for a typical record size. Larger buffers
 * are made for one write and dropped.
 */
export const appendBufferPooledBytesMax = 9 * MiB;
/** Free append buffers kept for reuse, shared by every partition. */
export const appendBuffersRetainedMax = 2;
/**
 * Granularity of a new append buffer's size, so that it fits the next group of about the same
 * size; a group under it gets the next power of two instead (never more than twice its bytes).
 */
export const appendBufferStepBytes = 1 * MiB;

/** Default size at which the active segment rolls, in bytes. */
export const segmentBytesDefault = 128 * MiB;
/** Smallest allowed `segment_bytes`, so tests can roll often. */
export const segmentBytesMin = 1 * KiB;
/**
 * Sealed segments whose files stay open at most, over the whole broker (`--max-open-segments`,
 * `storage/segment-handles.ts`): each holds one descriptor (its log) and its index in memory.
 */
export const maxOpenSegmentsDefault = 256;

/**
 * `--max-connections` when the descriptor limit cannot be read (`runtime/info.ts`
 * `openFilesSoftLimit`); where it can, the default is half of it (`maxConnectionsDefault`).
 */
export const maxConnectionsFallback = 4096;

/** Largest `--max-connections`. */
export const maxConnectionsMax = 1_000_000;

/**
 * The default `--max-connections` for a soft descriptor limit of `softLimit` (null: unknown):
 * half the limit, so that the other half stays for storage (2 per partition, one per cached
 * sealed segment, group and metadata files; docs/operations.md "Descriptors and connections"),
 * at least 16.
 */
export function maxConnectionsDefault(softLimit: number | null): number {
  if (softLimit === null || !Number.isFinite(softLimit)) return maxConnectionsFallback;
  return Math.min(maxConnectionsMax, Math.max(16, Math.floor(softLimit / 2)));
}
/** The range `--max-open-segments` accepts. */
export const maxOpenSegmentsMin = 1;
export const maxOpenSegmentsMax = 1_000_000;
/** Largest allowed `segment_bytes` (positions must stay far below 2^53). */
export const segmentBytesMax = 1024 * MiB * 4;
/** Default `segment_ms`: roll once the active segment is this old (7 days, as Kafka). */
export const segmentMsDefault = 7 * 24 * 3600 * 1000;

/** Default cap on an HTTP body or a TCP frame, in bytes (`--max-request-bytes`). */
export const requestBytesDefault = 16 * MiB;
/** Smallest allowed `--max-request-bytes`. */
export const requestBytesMin = 1 * KiB;
/** Largest allowed `--max-request-bytes`. */
export const requestBytesMax = 256 * MiB;

/** Default `--read-timeout`: a TCP connection stalled inside a frame is closed after this many ms. */
export const readTimeoutMsDefault = 30_000;

/** Requests one TCP connection may have started and not yet answered; past it the transport stops reading. */
export const tcpRequestsInFlightMax = 256;
/**
 * Bytes one TCP connection may have in flight: request frames started and not yet answered, plus
 * each started fetch's `max_bytes` (its answer's size), plus answers not yet taken by the kernel.
 * Past it the transport starts nothing more on that connection until answers go out; one request
 * is always allowed, so one may overshoot.
 */
export const tcpInFlightBytesMax = 64 * MiB;
/**
 * Default `--max-in-flight-bytes`: the same bytes as {@link tcpInFlightBytesMax}, summed over
 * every TCP and Kafka connection. Past it a connection starts a request only when it has nothing
 * in flight (docs/protocol.md "Pipelining and ordering").
 */
export const inFlightBytesTotalDefault = 256 * MiB;
/** Smallest allowed `--max-in-flight-bytes`. */
export const inFlightBytesTotalMin = 1 * MiB;
/** Largest allowed `--max-in-flight-bytes`. */
export const inFlightBytesTotalMax = 64 * 1024 * MiB;
/** On shutdown, TCP connections get this many ms to finish in-flight requests before they are destroyed. */
export const tcpShutdownGraceMs = 5_000;
/** After the broker ends a TCP connection, it waits this many ms for the peer to close before destroying it. */
export const tcpEndLingerMs = 2_000;
/**
 * On shutdown, once a connection's last answer is written and it is ended, the broker waits this
 * many ms (not {@link tcpEndLingerMs}) for the peer to close before destroying it: a live peer
 * closes within milliseconds, and a paused one (a SIGSTOPped follower) held the exit up by 2 s
 * (attack15b F2). The answer is in the peer's kernel by then, and the process is about to exit.
 */
export const tcpShutdownLingerMs = 250;

/** Default bytes a fetch returns when the client does not say (`max_bytes`). */
export const fetchBytesDefault = 1 * MiB;
/** Largest `max_bytes` a fetch may ask for. */
export const fetchBytesMax = 64 * MiB;
/** Default `max_records` of a fetch. */
export const fetchRecordsDefault = 1000;
/** Largest `max_records` of a fetch. */
export const fetchRecordsMax = 100_000;
/**
 * Bytes of its latest group writes a partition's leader keeps in memory for its followers' replica
 * fetches (`PartitionLog.keepRecentWrites`; docs/cluster.md "Replica fetch"): a few answers' worth.
 */
export const replicaRecentBytesMax = 4 * MiB;
/**
 * How long the HTTP server keeps an idle keep-alive connection open, in ms (`node:http`'s
 * `keepAliveTimeout`, also the raw path's, announced as `Keep-Alive: timeout=65`): far longer
 * than the few seconds a client's event loop may be busy, so a client that reuses its connection
 * after such a stall finds it open (docs/decisions.md §18).
 */
export const httpKeepAliveMs = 65_000;
/** Largest long-poll wait of a fetch, in ms. */
export const fetchWaitMsMax = 60_000;
/** Bytes of a positional read window on the fetch path; large so a fetch is one or two reads. */
export const readWindowBytes = 256 * KiB;
/**
 * Bytes a fetch's read window holds beyond its `max_bytes`: the records between the index entry
 * it starts from and the offset asked for (up to `indexIntervalBytes`) and the record that
 * crosses that interval's end, so that a fetch of `max_bytes` is usually one read.
 */
export const readWindowSlackBytes = 8 * KiB;
/**
 * Fetch read windows kept for reuse once their answer is written (`storage/read-windows.ts`;
 * docs/storage.md "Index and reads"): at most this many, each at most
 * {@link readWindowKeptBytesMax}, so at most 8 MiB stay allocated while no fetch runs.
 */
export const readWindowsKeptMax = 4;
/** The largest read window kept for reuse, in bytes (larger ones are left to the collector). */
export const readWindowKeptBytesMax = 2 * MiB;

/** Largest number of partitions in one topic. */
export const partitionsMax = 4096;
/** Longest topic name, in characters (as Kafka). */
export const topicNameCharsMax = 249;

/** Default timestamps allowed ahead of the broker clock, in ms (`max_timestamp_skew_ms`, docs/decisions.md §5). */
export const timestampSkewMsDefault = 3600_000;

/** Largest offset the broker assigns: JS numbers are exact up to here (docs/decisions.md §6). */
export const offsetMax = Number.MAX_SAFE_INTEGER;

/** Default `--flush-interval` in ms, used when `--flush-every-records` > 1. */
export const flushIntervalMsDefault = 1000;

/** Largest number of records in one produce request on the TCP and Kafka protocols. */
export const produceRecordsMax = 1_000_000;

/**
 * Largest number of records in one HTTP produce request (docs/decisions.md §19): a record costs
 * the client 2 body bytes (NDJSON `a\n`) but the broker its decoding and ~32 bytes of
 * `{"offsets":[…]}` answer, so the records, not the bytes, bound what one request costs.
 */
export const httpProduceRecordsMax = 10_000;

/**
 * Most object members a JSON HTTP produce body may hold, all its objects together
 * (docs/decisions.md §19): the body's one member (`records`) and six fields for each of
 * {@link httpProduceRecordsMax} records, the most a valid body holds (its six field names, none
 * repeated). Counted on the text before `JSON.parse`, whose cost grows with the distinct keys
 * it meets, whether in one object or spread over many.
 */
export const httpProduceMembersMax = 1 + 6 * httpProduceRecordsMax;

/**
 * Largest number of messages in one JSON-mode Durable Streams append (an array flattened into
 * messages; docs/durable-streams.md "Requests"): the cap of an HTTP produce request, for the same
 * reason — each message costs the broker its own bookkeeping, whatever its size in bytes.
 */
export const streamAppendMessagesMax = httpProduceRecordsMax;

/** At most one `recovery.progress` line per this many ms while a start recovers topics. */
export const recoveryProgressMs = 2000;

/**
 * Longest part of a client's value quoted in an error message, an error's details or a log line,
 * in UTF-16 code units (`src/lib/quote.ts`): a 200 KB field name is answered with its first
 * characters and its length, never echoed whole.
 */
export const quotedCharsMax = 64;
/**
 * Deepest nesting of arrays and objects accepted in a client's JSON (HTTP bodies, the TCP
 * CreateTopic config), checked on the text before it is parsed, so no code ever recurses over a
 * client's value deeper than this (`src/lib/json-nesting.ts`). Every documented body nests at most 3.
 */
export const jsonNestingDepthMax = 32;
/**
 * Longest message of a parser or the runtime (a JSON syntax error, an HTTP parse error) repeated
 * in an error, in characters: such messages may quote the client's input.
 */
export const foreignMessageCharsMax = 200;
/** Deepest nesting of arrays and objects that {@link quotedCharsMax}-bounded quoting shows before "…". */
export const quotedNestingDepthMax = 3;
/**
 * At most one log line per kind of refused request or connection every this many ms (bad TCP
 * frames, HTTP the parser refuses, read timeouts); the rest are counted (`src/lib/refusals.ts`,
 * `GET /v1/admin/metrics`) and summed into the next line, so no client can grow the log unbounded.
 */
export const refusalLogIntervalMs = 5_000;

/** Largest metadata file (topic.json, groups, keys) the broker will read, in bytes. */
export const metadataFileBytesMax = 16 * MiB;

assert(
  recordLenMax + recordLengthPrefixBytes <= requestBytesDefault,
  "a maximal record fits a default request",
);
assert(
  indexIntervalBytes < segmentBytesMin * 8,
  "index interval is small against the smallest segment",
);
assert(readWindowBytes >= indexIntervalBytes * 2, "one window covers an index gap and then some");
assert(readWindowSlackBytes >= indexIntervalBytes, "a read window's slack covers an index gap");
assert(
  readWindowKeptBytesMax >= readWindowBytes + readWindowSlackBytes,
  "a fetch of the default size reads into a window that can be kept",
);
assert(scanWindowBytes >= readWindowBytes, "a scan reads at least a fetch's window at a time");
assert(
  appendBufferPooledBytesMax >= groupEntryBytesMax,
  "a group's entries fit a pooled append buffer",
);
assert(appendBufferStepBytes <= appendBufferPooledBytesMax, "the step fits the pooled maximum");
assert(segmentBytesMax < Number.MAX_SAFE_INTEGER / 2, "positions are exact as JS numbers");
assert(fetchBytesDefault <= fetchBytesMax, "default fetch size within the maximum");

/** Default `--cleanup-interval-ms`: how often the retention and compaction tasks visit every partition. */
export const cleanupIntervalMsDefault = 30_000;
/** First wait before retrying a failed copy to the cold tier, in ms; it doubles per failure. */
export const coldOffloadBackoffMsMin = 1_000;
/** Longest wait between retries of a failed copy to the cold tier, in ms. */
export const coldOffloadBackoffMsMax = 300_000;
/**
 * Shortest time between two compaction passes over a partition's cold tier, in ms (each downloads
 * every cold segment); an explicit cleanup runs one at once.
 */
export const coldCompactionIntervalMs = 60 * 60 * 1000;
/** Default `--cold-cache-bytes`: memory for chunks of cold objects read, in bytes. */
export const coldCacheBytesDefault = 64 * MiB;
/**
 * Most distinct keys one compaction pass remembers (24 bytes a slot, at most 2^23 slots ≈ 200 MB).
 * A partition with more keys is compacted over the prefix of its segments that fits.
 */
export const compactionKeysMax = 6_000_000;

assert(coldOffloadBackoffMsMin <= coldOffloadBackoffMsMax, "cold backoff starts below its cap");

/** Largest `producers.journal` the broker will read at start, in bytes (it is rotated far below this). */
export const producerJournalBytesMax = 64 * MiB;
/** Entries after which the producer journal is folded into a new `producers.json` snapshot. */
export const producerJournalEntriesRotate = 4096;
/** Batches remembered per (producer, partition) for answering retries with their original offsets (as Kafka's 5 in flight). */
export const producerBatchesRemembered = 5;
/** Default idle time after which a producer's state is forgotten, in ms (`--producer-expiry-ms`, 7 days). */
export const producerExpiryMsDefault = 7 * 24 * 3600 * 1000;
/**
 * Default cap on the producer ids whose state the broker keeps (`--producer-ids-max`): past it the
 * least recently active idle producer is forgotten, as if expired (docs/decisions.md §21). About
 * 600 bytes of `producers.json` each with one partition: 20 000 keep it near 12 MB.
 */
export const producerIdsMaxDefault = 20_000;
/**
 * Largest `producers.json` the broker reads at start and writes, in bytes: a snapshot that would
 * be larger forgets its least recently active idle producers until it fits, so every snapshot the
 * broker writes is one it can read back (attack18 F4: a 20 MB snapshot over the 16 MiB metadata
 * limit made idempotent produce unavailable after a restart). Below V8's longest string (2^29 − 24
 * UTF-16 units), which `JSON.parse` needs.
 */
export const producerSnapshotBytesMax = 256 * MiB;
/** Longest producer id, in characters (`[A-Za-z0-9._:-]`). */
export const producerIdCharsMax = 249;
/** Largest producer epoch. */
export const producerEpochMax = 0x7fff_ffff;
/**
 * Restarts of headroom the broker keeps below {@link producerEpochMax} when it starts a producer
 * id it has no state for at the Unix second: from 2038 such an id starts at 2^31 − 1 − 2^24, not
 * at the cap (docs/decisions.md §20).
 */
export const producerEpochHeadroom = 2 ** 24;
/** Default consumer-group session timeout, in ms: a member without a heartbeat for this long is removed. */
export const groupSessionTimeoutMsDefault = 30_000;
/** Smallest session timeout a member may ask for, in ms. */
export const groupSessionTimeoutMsMin = 100;
/** Largest session timeout a member may ask for, in ms. */
export const groupSessionTimeoutMsMax = 3_600_000;
/** Most members one consumer group holds. */
export const groupMembersMax = 1000;
/** Most topics one member may subscribe to. */
export const groupTopicsMax = 1000;
/** Most offsets one commit may carry. */
export const groupCommitOffsetsMax = 100_000;
/** Longest consumer-group name, in characters (same alphabet as topics: it is a file name). */
export const groupNameCharsMax = 249;

/** Random bytes in the secret part of an API key: 256 bits (`docs/security.md`). */
export const apiKeySecretBytes = 32;
/** Random bytes in the id part of an API key (64 bits, hex): the non-secret part used to look it up and to log. */
export const apiKeyIdBytes = 8;
/** Longest API key text accepted from a client, in bytes; a longer `Authorization` value or authenticate frame is refused unread. */
export const apiKeyTextBytesMax = 256;
/** Longest API key name, in characters (`[A-Za-z0-9._-]`). */
export const apiKeyNameCharsMax = 64;
/** Most API keys one broker holds. */
export const apiKeysMax = 10_000;
/** Most topic or group patterns one key carries. */
export const apiKeyPatternsMax = 100;
/** A key's `last_used_ms` in `api_keys.json` is rewritten at most this often, in ms. */
export const apiKeyLastUsedIntervalMs = 60_000;
/**
 * Largest request frame a TCP connection may send before it has authenticated, in bytes (only
 * while authentication is on): an authenticate frame is far smaller, and a claimed length past
 * this is refused before anything is read.
 */
export const authenticateFrameBytesMax = 1 * KiB;

assert(
  authenticateFrameBytesMax >= apiKeyTextBytesMax + 16,
  "an authenticate frame fits the pre-authentication cap",
);
assert(
  authenticateFrameBytesMax <= requestBytesMin,
  "the pre-authentication cap is below every request cap",
);

/**
 * Largest schema text the schema registry accepts, in UTF-8 bytes (docs/registry.md "Limits").
 * Every schema lives in `schemas.json`, which is read whole at start, so one schema may take at
 * most a sixteenth of the file.
 */
export const schemaBytesMax = 1 * MiB;
/**
 * Most comparisons of (sub)schema pairs one JSON Schema compatibility check makes (docs/registry.md
 * "Limits"); past it the schema is refused as too complex to check (42201). Each pair is compared
 * once, so real schemas need about (nodes of one) × (nodes of the other) at most.
 */
export const jsonCompatStepsMax = 200_000;
/**
 * Deepest nesting of comparisons in one JSON Schema compatibility check (docs/registry.md
 * "Limits"): `$ref` chains nest past the text's depth, so this bounds the stack; past it, 42201.
 */
export const jsonCompatDepthMax = 256;
/**
 * Most names one JSON Schema `properties` object may have (docs/registry.md "Limits"). ajv's
 * compile time grows with the square of it (500: 0.55 s, 1000: 2.1 s, 2000: 5.6 s on a loaded
 * 2-vCPU host) and its generated code overflowed Node's stack near 4000; the compatibility test
 * route, open to every role, compiles the schema it is given.
 */
export const jsonSchemaPropertiesMax = 1000;
/**
 * Deepest nesting of a record key or value checked against a schema at produce time
 * (docs/registry.md "Produce-time validation"): Avro records, arrays and maps, or JSON arrays and
 * objects. Checked before the recursive validators run, so the cut-off is the same on every
 * runtime rather than wherever its stack ends.
 */
export const schemaValueDepthMax = 512;
/** Deepest nesting of objects and arrays in a schema's JSON text; deeper schemas are refused before any parser recurses into them. */
export const schemaDepthMax = 128;
/** Longest schema registry subject name, in characters. */
export const subjectCharsMax = 255;
/** Compiled validators (one per schema id) the registry keeps; the least recently added goes first. */
export const schemaValidatorsCachedMax = 1024;
/** Largest `schemas.json` the registry writes, in bytes: registering past it is refused, so the file can always be read back. */
export const schemasFileBytesMax = metadataFileBytesMax;
/** Bytes of the Confluent wire header in front of a serialized key or value: magic byte 0, then the schema id (u32 big-endian). */
export const schemaWireHeaderBytes = 5;

assert(schemaBytesMax * 16 <= schemasFileBytesMax, "sixteen maximal schemas fit schemas.json");
/**
 * Largest `registry/index` value of a cluster's registry in etcd, in bytes (docs/cluster.md
 * "Schema registry and API keys in etcd"): a registration past it is refused (42201).
 */
export const registryIndexBytesMax = 384 * KiB;
/**
 * What one registry write to etcd may carry, in bytes: the index and the new schema's record,
 * kept below etcd's default request limit (`--max-request-bytes`, 1.5 MiB) with room for the
 * request's framing. A registration past it is refused (42201).
 */
export const registryWriteBytesMax = 1.5 * MiB - 64 * KiB;
/** Most schemas a data directory's `schemas.json` may hold to be imported into an empty cluster registry (one etcd transaction of at most 128 operations). */
export const registryImportSchemasMax = 100;
/** Longest a cluster registry read waits for etcd before answering from the broker's copy, in ms. */
export const registrySyncWaitMaxMs = 1000;

assert(
  registryIndexBytesMax + schemaBytesMax <= registryWriteBytesMax,
  "a registration of a maximal schema (in canonical form, without escapes) fits one etcd write",
);
/**
 * Longest Durable Streams path (the part of the URL after `/v1/stream/`, percent-decoded), in
 * UTF-8 bytes. Paths whose topic name would pass {@link topicNameCharsMax} get a hashed name
 * (docs/durable-streams.md "Stream paths and topic names"); the runtime's request-line limit
 * (16 KiB on Node) may refuse a longer URL first, with its own 4xx.
 */
export const streamPathBytesMax = 16 * KiB;
/** Longest `Producer-Id` of a Durable Streams idempotent producer, in UTF-8 bytes. */
export const streamProducerIdBytesMax = 1 * KiB;
/** Longest `Stream-Seq` value (it is stored as the record key), in UTF-8 bytes. */
export const streamSeqBytesMax = 1 * KiB;
/** Largest `Stream-TTL`, in seconds (so that the window in ms stays an exact JS number). */
export const streamTtlSecondsMax = 1_000_000_000_000;
/** Default server-side long-poll timeout of a Durable Streams live read, in ms (`--stream-long-poll-ms`). */
export const streamLongPollMsDefault = 30_000;
/** An SSE connection of the Durable Streams protocol is closed after this many ms (protocol §10.2, ~60 s). */
export const streamSseConnectionMs = 60_000;
/** At most this many bytes of stream data in one catch-up or long-poll answer or SSE event (one record may exceed it). */
export const streamReadBytesMax = 1 * MiB;
/** Length of one Durable Streams cursor interval, in ms (protocol §10.1: 20 s). */
export const streamCursorIntervalMs = 20_000;
/** Epoch of the cursor intervals: 2024-10-09T00:00:00Z (protocol §10.1). */
export const streamCursorEpochMs = 1_728_432_000_000;
/** Largest jitter added to a cursor that caught up with the clock, in ms (protocol §10.1: 1–3600 s). */
export const streamCursorJitterMsMax = 3_600_000;
/** How often expired streams (TTL, Expires-At) are removed in the background, in ms. */
export const streamExpirySweepMs = 10_000;

assert(streamReadBytesMax <= fetchBytesMax, "a stream read fits one fetch");
assert(streamLongPollMsDefault <= fetchWaitMsMax, "the stream long-poll is a fetch wait");

/**
 * Array and map items of zero-byte types (null, an empty record) an Avro value may claim beyond
 * one item per byte of the value: bounds the decoding of an item count a producer chose
 * (docs/registry.md "Produce-time validation").
 */
export const avroZeroByteItemsMax = 65_536;

/**
 * Most consumer groups `GET /metrics` labels series with (those with the largest total lag); the
 * rest are counted in `esb_consumer_groups_unexported`. Group names are chosen by clients, so
 * this bounds the series they can make (docs/operations.md "Cardinality").
 */
export const metricsGroupsMax = 1000;
/** Period of the event-loop delay probe behind `esb_event_loop_delay_seconds`, in ms. */
export const eventLoopProbeMs = 100;

/**
 * Producer epochs and partitions whose duplicate-sequence refusal the broker remembers having
 * logged (`producer.duplicate_sequence`, docs/kafka.md "Supported apis"); past it, all are
 * forgotten at once and each may be logged again.
 */
export const duplicateSequenceLoggedMax = 10_000;
