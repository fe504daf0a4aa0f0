/**
 * Incremental frame splitting for the TCP protocol (grammar: `envelope.ts`). Bytes arrive in chunks
 * of any size; {@link FrameDecoder} keeps them in a list and hands out a frame only once all of it
 * has arrived. It reads the 4-byte `length` first and refuses a length outside
 * [`lengthMin`, `lengthMax`] before it waits for (let alone allocates) that many bytes: an HTTP
 * request sent to the TCP port (`"GET "` reads as 1 195 725 856) or a TLS hello fails at its first
 * four bytes. A frame that lies inside one chunk is returned as a view; one that spans chunks is
 * joined into a buffer of exactly its (already checked) length.
 *
 * When {@link FrameDecoder.next} is asked for a frame that has not fully arrived but of which at
 * least half has ({@link assemblyStartFraction}), the decoder copies what is there into the
 * frame's buffer and copies each later chunk straight into it on `push`, so the chunks (Node
 * allocates a fresh one per socket read) die at once instead of living until the frame completes.
 * With 64 producers sending ~284 KB frames that lowered the broker's RSS by a few MiB (dead chunks
 * that had lived long enough to be promoted waited for a full GC). The half bound keeps the rule
 * that a claimed length is never allocated on the claim alone: the decoder allocates at most
 * twice the bytes the peer has actually sent.
 */
import { Errors } from "../broker/errors.ts";
import { ownBytes } from "../lib/read-slab.ts";
import { frameLengthBytes } from "./envelope.ts";
import { ProtocolError } from "./wire.ts";

/** A frame `length` outside the allowed range. The decoder is unusable afterwards: close the stream. */
export class FrameLengthError extends ProtocolError {
  override name = "FrameLengthError";
  /**
   * @param length the `length` the peer sent.
   * @param tooLarge true if above the maximum (`request_too_large`), false if below the minimum (`invalid_request`).
   */
  constructor(
    readonly length: number,
    readonly tooLarge: boolean,
    message: string,
  ) {
    super(tooLarge ? Errors.requestTooLarge : Errors.invalidRequest, "length", message);
  }
}

/**
 * {@link FrameDecoder.next} starts copying an incomplete frame into its own buffer once the bytes
 * received of it reach this fraction of its length (see the module comment).
 */
export const assemblyStartFraction = 0.5;

/** Bounds of {@link FrameDecoder}. */
export interface FrameDecoderOptions {
  /** Smallest allowed `length` (8 for requests, 6 for responses). */
  lengthMin: number;
  /** Largest allowed `length`, in bytes (the request cap, e.g. `--max-request-bytes`). */
  lengthMax: number;
}

/**
 * Splits a byte stream into frames. Not thread-safe in any sense; one per connection.
 *
 * Memory: it holds the bytes pushed and not yet returned, plus, while it assembles a frame, the
 * rest of that frame's buffer (never more than the bytes of it received: see
 * {@link assemblyStartFraction}). The caller bounds that by not pushing more while it is not
 * reading (pausing the socket).
 */
export class FrameDecoder {
  readonly #lengthMin: number;
  #lengthMax: number;
  #chunks: Uint8Array[] = [];
  /** Index of the first live chunk in #chunks. */
  #head = 0;
  /** Bytes of #chunks[#head] already consumed. */
  #headPos = 0;
  /** Bytes in #chunks not yet consumed. */
  #buffered = 0;
  /** `length` of the frame at the front once read and checked, else −1. */
  #frameLength = -1;
  /**
   * The front frame's buffer (exactly `#frameLength` bytes) while it is being assembled, else
   * null. While non-null, its length prefix has been consumed and #chunks holds only bytes after
   * the frame (none until the frame is complete).
   */
  #assembly: Uint8Array | null = null;
  /** Bytes of #assembly filled so far. */
  #assembled = 0;
  #failure: FrameLengthError | null = null;

  constructor(options: FrameDecoderOptions) {
    if (!(Number.isInteger(options.lengthMin) && options.lengthMin >= 0))
      throw new RangeError(`lengthMin ${options.lengthMin} must be a non-negative integer`);
    if (!(Number.isInteger(options.lengthMax) && options.lengthMax >= options.lengthMin))
      throw new RangeError(`lengthMax ${options.lengthMax} must be an integer ≥ lengthMin`);
    this.#lengthMin = options.lengthMin;
    this.#lengthMax = options.lengthMax;
  }

  /** Largest allowed `length`, in bytes. */
  get lengthMax(): number {
    return this.#lengthMax;
  }

  /**
   * Changes the largest allowed `length` for frames whose length has not been read yet (the TCP
   * transport raises it once a connection has authenticated).
   * @throws RangeError if it is below `lengthMin` or not an integer.
   */
  set lengthMax(bytes: number) {
    if (!(Number.isInteger(bytes) && bytes >= this.#lengthMin))
      throw new RangeError(`lengthMax ${bytes} must be an integer ≥ lengthMin`);
    this.#lengthMax = bytes;
  }

  /** Bytes received and not yet returned as part of a frame. */
  get bufferedBytes(): number {
    return this.#assembly === null
      ? this.#buffered
      : frameLengthBytes + this.#assembled + this.#buffered;
  }

  /**
   * Adds a chunk. It is kept by reference, not copied (the caller must not modify it afterwards),
   * except while a frame is being assembled: then the bytes of that frame are copied into it.
   */
  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    const assembly = this.#assembly;
    if (assembly !== null && this.#assembled < assembly.length) {
      const n = Math.min(chunk.length, assembly.length - this.#assembled);
      assembly.set(n === chunk.length ? chunk : chunk.subarray(0, n), this.#assembled);
      this.#assembled += n;
      if (n === chunk.length) return;
      chunk = chunk.subarray(n);
    }
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
  }

  /**
   * Returns the next complete frame (the bytes after `length`), or null if it has not fully arrived.
   * @throws FrameLengthError if the next frame's `length` is out of range; every later call throws it too.
   */
  next(): Uint8Array | null {
    if (!this.#frameReady()) {
      this.#startAssembly();
      return null;
    }
    if (this.#assembly !== null) return this.#takeAssembly();
    this.#skip(frameLengthBytes);
    const frame = this.#take(this.#frameLength);
    this.#frameLength = -1;
    return frame;
  }

  /**
   * Like {@link next}, but returns the frame as the views of the chunks it lies in, in order,
   * without joining them (one view when it lies in one chunk). For large frames whose parts can
   * be read where they are, e.g. the records of a fetch response.
   * @throws FrameLengthError as {@link next}.
   */
  nextChunks(): Uint8Array[] | null {
    if (!this.#frameReady()) return null;
    if (this.#assembly !== null) return [this.#takeAssembly()];
    this.#skip(frameLengthBytes);
    const chunks: Uint8Array[] = [];
    let left = this.#frameLength;
    while (left > 0) {
      const chunk = this.#chunks[this.#head];
      const n = Math.min(chunk.length - this.#headPos, left);
      chunks.push(chunk.subarray(this.#headPos, this.#headPos + n));
      left -= n;
      this.#skip(n);
    }
    this.#frameLength = -1;
    return chunks;
  }

  /** True once the next frame has fully arrived (its length read and checked). */
  #frameReady(): boolean {
    if (this.#failure) throw this.#failure;
    if (this.#assembly !== null) return this.#assembled === this.#assembly.length;
    if (this.#frameLength < 0) {
      if (this.#buffered < frameLengthBytes) return false;
      // Read in place when the prefix lies in the head chunk (no view made per frame).
      const head = this.#chunks[this.#head];
      const at = this.#headPos;
      const inHead = head.length - at >= frameLengthBytes;
      const prefix = inHead ? head : this.#peek(frameLengthBytes);
      const p = inHead ? at : 0;
      const length =
        ((prefix[p] << 24) | (prefix[p + 1] << 16) | (prefix[p + 2] << 8) | prefix[p + 3]) >>> 0;
      if (length < this.#lengthMin) {
        this.#failure = new FrameLengthError(
          length,
          false,
          `Cannot read frame: length ${length} is below the minimum of ${this.#lengthMin}`,
        );
        throw this.#failure;
      }
      if (length > this.#lengthMax) {
        this.#failure = new FrameLengthError(
          length,
          true,
          `Cannot read frame: length ${length} is over the limit of ${this.#lengthMax} bytes${textHint(this.#peek(frameLengthBytes))}`,
        );
        throw this.#failure;
      }
      this.#frameLength = length;
    }
    return this.#buffered >= frameLengthBytes + this.#frameLength;
  }

  /**
   * A copy of the first `count` buffered bytes, or null if fewer are buffered. For reading a frame
   * header (e.g. its correlation id) when the frame itself is refused.
   */
  peekBytes(count: number): Uint8Array | null {
    if (this.bufferedBytes < count) return null;
    if (this.#assembly === null) return this.#peek(count).slice();
    // Assembling: the length prefix was consumed, and the frame's bytes so far are in #assembly.
    const out = new Uint8Array(count);
    const prefix = Uint8Array.of(
      this.#frameLength >>> 24,
      (this.#frameLength >>> 16) & 0xff,
      (this.#frameLength >>> 8) & 0xff,
      this.#frameLength & 0xff,
    );
    out.set(prefix.subarray(0, Math.min(count, frameLengthBytes)));
    if (count <= frameLengthBytes) return out;
    const fromAssembly = Math.min(count - frameLengthBytes, this.#assembled);
    out.set(this.#assembly.subarray(0, fromAssembly), frameLengthBytes);
    const rest = count - frameLengthBytes - fromAssembly;
    if (rest > 0) this.#copyOut(out, frameLengthBytes + fromAssembly, rest);
    return out;
  }

  /**
   * Copies every buffered chunk that is a small view of a larger buffer (at most half of it) into
   * a buffer of its own, so that bytes waiting for the rest of their frame do not keep the larger
   * buffer alive (a socket layer may hand out views of a shared slab). Chunks that are most of
   * their buffer are kept as they are.
   */
  compact(): void {
    const chunks = this.#chunks;
    for (let i = this.#head; i < chunks.length; i++) {
      const chunk = chunks[i];
      chunks[i] = ownBytes(chunk);
    }
  }

  /** Drops everything buffered (after a failure, or when the connection is closing). */
  clear(): void {
    this.#chunks = [];
    this.#head = 0;
    this.#headPos = 0;
    this.#buffered = 0;
    this.#frameLength = -1;
    this.#assembly = null;
    this.#assembled = 0;
  }

  /**
   * Starts assembling the front frame (see {@link assemblyStartFraction}) if its length is known
   * and at least that fraction of it has arrived: allocates its buffer, copies the received bytes
   * into it and drops them from the chunks.
   */
  #startAssembly(): void {
    if (this.#assembly !== null || this.#frameLength < 0) return;
    const received = this.#buffered - frameLengthBytes;
    if (received < this.#frameLength * assemblyStartFraction) return;
    this.#skip(frameLengthBytes);
    const assembly = new Uint8Array(this.#frameLength);
    this.#copyOut(assembly, 0, received);
    this.#skip(received);
    this.#assembly = assembly;
    this.#assembled = received;
  }

  /** Returns the assembled front frame (complete) and leaves the decoder between frames. */
  #takeAssembly(): Uint8Array {
    const frame = this.#assembly!;
    this.#assembly = null;
    this.#assembled = 0;
    this.#frameLength = -1;
    return frame;
  }

  /** The first `count` bytes (count ≤ buffered), as a view when they lie in one chunk. */
  #peek(count: number): Uint8Array {
    if (count === 0) return new Uint8Array(0); // a zero-length frame (lengthMin 0), or peekBytes(0): there may be no chunk
    const first = this.#chunks[this.#head];
    if (first.length - this.#headPos >= count)
      return first.subarray(this.#headPos, this.#headPos + count);
    const out = new Uint8Array(count);
    this.#copyOut(out, 0, count);
    return out;
  }

  /** Copies the first `count` bytes of the chunks (count ≤ buffered) into `out` at `outPos`, consuming nothing. */
  #copyOut(out: Uint8Array, outPos: number, count: number): void {
    let filled = 0;
    let index = this.#head;
    let pos = this.#headPos;
    while (filled < count) {
      const chunk = this.#chunks[index];
      const n = Math.min(chunk.length - pos, count - filled);
      out.set(chunk.subarray(pos, pos + n), outPos + filled);
      filled += n;
      index++;
      pos = 0;
    }
  }

  #skip(count: number): void {
    let left = count;
    while (left > 0) {
      const chunk = this.#chunks[this.#head];
      const n = Math.min(chunk.length - this.#headPos, left);
      this.#headPos += n;
      left -= n;
      if (this.#headPos === chunk.length) this.#dropHead();
    }
    this.#buffered -= count;
  }

  /** Removes and returns `count` bytes (count ≤ buffered, already checked against the cap). */
  #take(count: number): Uint8Array {
    const out = this.#peek(count);
    this.#skip(count);
    return out;
  }

  #dropHead(): void {
    this.#head++;
    this.#headPos = 0;
    if (this.#head === this.#chunks.length) {
      this.#chunks = [];
      this.#head = 0;
    } else if (this.#head >= 64 && this.#head * 2 >= this.#chunks.length) {
      this.#chunks = this.#chunks.slice(this.#head);
      this.#head = 0;
    }
  }
}

/**
 * When a length prefix is four printable ASCII bytes ("HTTP", "GET ", "POST"), the peer speaks a
 * text protocol: say so, since that is almost always a client pointed at the HTTP port.
 */
function textHint(prefix: Uint8Array): string {
  // A TLS record: content type 22 (handshake), then protocol version 3.x.
  if (prefix[0] === 0x16 && prefix[1] === 0x03 && prefix[2] <= 0x04)
    return " (its first bytes are a TLS handshake: the peer speaks TLS but this port is plain TCP; connect without TLS, or start the broker with --tls-cert and --tls-key)";
  for (let i = 0; i < 4; i++) if (prefix[i] < 0x20 || prefix[i] > 0x7e) return "";
  return ` (its first bytes are the text "${String.fromCharCode(prefix[0], prefix[1], prefix[2], prefix[3])}": the peer speaks a text protocol such as HTTP, not the es-broker TCP protocol; check the port)`;
}
