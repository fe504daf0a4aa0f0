/**
 * Incremental frame splitting for the TCP protocol (grammar: `codec.ts`). Bytes arrive in chunks
 * of any size; {@link FrameDecoder} keeps them in a list and hands out a frame only once all of it
 * has arrived. It reads the 4-byte `length` first and refuses a length outside
 * [`lengthMin`, `lengthMax`] before it waits for (let alone allocates) that many bytes: an HTTP
 * request sent to the TCP port (`"GET "` reads as 1 195 725 856) or a TLS hello fails at its first
 * four bytes. A frame that lies inside one chunk is returned as a view; one that spans chunks is
 * joined into a buffer of exactly its (already checked, already present) length.
 */
import { Errors } from "../broker/errors.ts";
import { frameLengthBytes } from "./codec.ts";
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
 * Memory: it holds exactly the bytes pushed and not yet returned. The caller bounds that by not
 * pushing more while it is not reading (pausing the socket).
 */
export class FrameDecoder {
  readonly #lengthMin: number;
  readonly #lengthMax: number;
  #chunks: Uint8Array[] = [];
  /** Index of the first live chunk in #chunks. */
  #head = 0;
  /** Bytes of #chunks[#head] already consumed. */
  #headPos = 0;
  #buffered = 0;
  /** `length` of the frame at the front once read and checked, else −1. */
  #frameLength = -1;
  #failure: FrameLengthError | null = null;

  constructor(options: FrameDecoderOptions) {
    if (!(Number.isInteger(options.lengthMin) && options.lengthMin >= 0)) throw new RangeError(`lengthMin ${options.lengthMin} must be a non-negative integer`);
    if (!(Number.isInteger(options.lengthMax) && options.lengthMax >= options.lengthMin)) throw new RangeError(`lengthMax ${options.lengthMax} must be an integer ≥ lengthMin`);
    this.#lengthMin = options.lengthMin;
    this.#lengthMax = options.lengthMax;
  }

  /** Bytes received and not yet returned as part of a frame. */
  get bufferedBytes(): number {
    return this.#buffered;
  }

  /** Adds a chunk (kept by reference, not copied; the caller must not modify it afterwards). */
  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
  }

  /**
   * Returns the next complete frame (the bytes after `length`), or null if it has not fully arrived.
   * @throws FrameLengthError if the next frame's `length` is out of range; every later call throws it too.
   */
  next(): Uint8Array | null {
    if (!this.#frameReady()) return null;
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
    if (this.#frameLength < 0) {
      if (this.#buffered < frameLengthBytes) return false;
      const prefix = this.#peek(frameLengthBytes);
      const length = ((prefix[0] << 24) | (prefix[1] << 16) | (prefix[2] << 8) | prefix[3]) >>> 0;
      if (length < this.#lengthMin) {
        this.#failure = new FrameLengthError(length, false, `Cannot read frame: length ${length} is below the minimum of ${this.#lengthMin}`);
        throw this.#failure;
      }
      if (length > this.#lengthMax) {
        this.#failure = new FrameLengthError(length, true, `Cannot read frame: length ${length} is over the limit of ${this.#lengthMax} bytes${textHint(prefix)}`);
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
    if (this.#buffered < count) return null;
    return this.#peek(count).slice();
  }

  /** Drops everything buffered (after a failure, or when the connection is closing). */
  clear(): void {
    this.#chunks = [];
    this.#head = 0;
    this.#headPos = 0;
    this.#buffered = 0;
    this.#frameLength = -1;
  }

  /** The first `count` bytes (count ≤ buffered), as a view when they lie in one chunk. */
  #peek(count: number): Uint8Array {
    const first = this.#chunks[this.#head];
    if (first.length - this.#headPos >= count) return first.subarray(this.#headPos, this.#headPos + count);
    const out = new Uint8Array(count);
    let filled = 0;
    let index = this.#head;
    let pos = this.#headPos;
    while (filled < count) {
      const chunk = this.#chunks[index];
      const n = Math.min(chunk.length - pos, count - filled);
      out.set(chunk.subarray(pos, pos + n), filled);
      filled += n;
      index++;
      pos = 0;
    }
    return out;
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
  for (let i = 0; i < 4; i++) if (prefix[i] < 0x20 || prefix[i] > 0x7e) return "";
  return ` (its first bytes are the text "${String.fromCharCode(prefix[0], prefix[1], prefix[2], prefix[3])}": the peer speaks a text protocol such as HTTP, not the es-broker TCP protocol; check the port)`;
}
