import Foundation
import Viewfinder
#if canImport(Glibc)
import Glibc
#endif

/// Big-endian box building for the QuickTime/ISO-BMFF writer.
struct BoxBuffer {
    var bytes: [UInt8] = []
    private var open: [Int] = []

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }
    mutating func u32(_ v: UInt32) { for s in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8((v >> UInt32(s)) & 0xFF)) } }
    mutating func u64(_ v: UInt64) { for s in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((v >> UInt64(s)) & 0xFF)) } }
    mutating func i32(_ v: Int32) { u32(UInt32(bitPattern: v)) }
    mutating func fourcc(_ s: String) { let u = Array(s.utf8); precondition(u.count == 4); bytes += u }
    mutating func zeros(_ n: Int) { bytes += [UInt8](repeating: 0, count: n) }
    mutating func fullBoxHeader(version: UInt8, flags: UInt32) { u8(version); u8(UInt8((flags >> 16) & 0xFF)); u16(UInt16(flags & 0xFFFF)) }
    /// A Pascal string padded to `size` bytes (QuickTime compressor name) or, with size 0, unpadded.
    mutating func pascal(_ s: String, size: Int = 0) {
        let u = Array(s.utf8.prefix(size > 0 ? size - 1 : 255))
        u8(UInt8(u.count)); bytes += u
        if size > 0 { zeros(size - 1 - u.count) }
    }
    mutating func matrix() {
        for v: UInt32 in [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] { u32(v) }
    }
    /// A track matrix that shows a `width`×`height` picture turned `rotation` degrees clockwise
    /// (a, b, u, c, d, v, x, y, w; 16.16 fixed point but u, v, w in 2.30), as cameras write it.
    mutating func matrix(rotation: Int, width: Int, height: Int) {
        let one: Int32 = 0x0001_0000, w30: Int32 = 0x4000_0000
        let (W, H) = (Int32(width) << 16, Int32(height) << 16)
        let m: [Int32]
        switch rotation {
        case 90: m = [0, one, 0, -one, 0, 0, H, 0, w30]
        case 180: m = [-one, 0, 0, 0, -one, 0, W, H, w30]
        case 270: m = [0, -one, 0, one, 0, 0, 0, W, w30]
        default: m = [one, 0, 0, 0, one, 0, 0, 0, w30]
        }
        for v in m { i32(v) }
    }
    /// Opens a box; returns the offset of its size field.
    @discardableResult
    mutating func begin(_ type: String) -> Int { let o = bytes.count; u32(0); fourcc(type); open.append(o); return o }
    mutating func end() {
        let o = open.removeLast()
        let size = UInt32(bytes.count - o)
        bytes[o] = UInt8(size >> 24); bytes[o + 1] = UInt8((size >> 16) & 0xFF); bytes[o + 2] = UInt8((size >> 8) & 0xFF); bytes[o + 3] = UInt8(size & 0xFF)
    }
    mutating func patch32(at o: Int, _ v: UInt32) {
        bytes[o] = UInt8(v >> 24); bytes[o + 1] = UInt8((v >> 16) & 0xFF); bytes[o + 2] = UInt8((v >> 8) & 0xFF); bytes[o + 3] = UInt8(v & 0xFF)
    }
}

/// The tracks of a movie.
public enum MovieTrackDescription: Sendable, Equatable {
    /// Motion-JPEG video (QuickTime `jpeg` sample entry) of the given size.
    case mjpegVideo(width: Int, height: Int)
    /// Signed 16-bit little-endian interleaved PCM (QuickTime `sowt`).
    case pcmAudio(sampleRate: Int, channels: Int)

    var isVideo: Bool { if case .mjpegVideo = self { return true } else { return false } }
}

/// A crash-safe QuickTime movie writer: fragmented MOV.
///
/// The file starts with `ftyp` and a `moov` whose sample tables are empty and whose `mvex` announces
/// fragments. Samples are collected in memory and written as `moof`+`mdat` pairs every
/// ``fragmentInterval`` seconds of media (one `write` per fragment; a failed write is cut back, so
/// the file always ends on a complete fragment). After `kill -9`, everything up to the last complete
/// fragment plays in FFmpeg and QuickTime-style readers; ``finish(lastFrameDurationNanoseconds:)`` only patches durations.
///
/// Sample times are the capture timestamps: each video sample lasts until the next one starts
/// (variable frame rate is kept), so a sample is held back until its successor arrives; the last
/// one gets the previous sample's duration. Audio samples are PCM blocks of any length placed at
/// their own timestamps on a timescale equal to the sample rate.
///
/// Not thread-safe: one thread appends (the movie output's thread).
public final class MovieWriter {
    public let path: String
    public let tracks: [MovieTrackDescription]
    /// Maximum media time per fragment (≤ 1 s keeps the `kill -9` loss under a second).
    public let fragmentInterval: Double
    /// Whether to `fdatasync` each fragment (survives power loss, not only process death).
    public var syncEachFragment = false

    static let movieTimescale: UInt32 = 1000
    static let videoTimescale: UInt32 = 90_000

    private let file: OutputFile
    private var origin: UInt64?
    private var fragmentSequence: UInt32 = 0
    private var durationPatchOffsets: [(offset: UInt64, track: Int?)] = []
    private var mdhdPatchOffsets: [UInt64] = []

    private struct Pending { var data: [UInt8]; var decodeTime: UInt64 }
    private final class TrackState {
        let timescale: UInt32
        let isVideo: Bool
        /// Decode time of the next sample to be placed (ticks).
        var nextDecodeTime: UInt64 = 0
        /// Decode time of the first sample in the current fragment.
        var fragmentStart: UInt64 = 0
        var sizes: [UInt32] = []
        var durations: [UInt32] = []
        /// Sample bytes of the fragment being built; a held sample (duration not known yet) sits at the end.
        var payload: [UInt8] = []
        var held: (size: Int, ticks: UInt64)?
        var lastDuration: UInt32 = 0
        var samplesWritten: UInt64 = 0
        var ticksWritten: UInt64 = 0
        init(timescale: UInt32, isVideo: Bool) { self.timescale = timescale; self.isVideo = isVideo }
        var bufferedTicks: UInt64 { durations.reduce(0) { $0 + UInt64($1) } }
        /// Payload bytes of the complete samples (all but the held one).
        var completeBytes: Int { payload.count - (held?.size ?? 0) }
    }
    private var states: [TrackState]

    /// Bytes on disk (complete fragments only).
    public var bytesWritten: UInt64 { file.offset }
    /// Video frames on disk.
    public var videoSamplesWritten: UInt64 { states.first(where: { $0.isVideo })?.samplesWritten ?? 0 }
    /// Bytes waiting for the next fragment.
    public var bufferedBytes: Int { states.reduce(0) { $0 + $1.payload.count } + 512 }
    /// Media seconds on disk, per the longest track.
    public var durationWritten: Double {
        states.map { Double($0.ticksWritten) / Double($0.timescale) }.max() ?? 0
    }
    /// Media seconds appended so far (on disk and buffered).
    public var durationAppended: Double {
        states.map { Double($0.ticksWritten + $0.bufferedTicks) / Double($0.timescale) }.max() ?? 0
    }

    /// Creates the file and writes its header. Fails with ``SinkError/fileExists(path:)`` when the
    /// file exists and `overwrite` is false.
    /// Clockwise rotation (0, 90, 180, 270 degrees) players apply to the video track when they show
    /// it: written into its track matrix; the pixels are stored as captured.
    public let rotation: Int

    public init(path: String, tracks: [MovieTrackDescription], fragmentInterval: Double = 0.5, overwrite: Bool = false, rotation: Int = 0) throws {
        guard !tracks.isEmpty else { throw SinkError.invalidArgument(name: "tracks", reason: "a movie needs at least one track") }
        guard [0, 90, 180, 270].contains(rotation) else { throw SinkError.invalidArgument(name: "rotation", reason: "\(rotation)° (supported: 0, 90, 180, 270)") }
        self.rotation = rotation
        guard fragmentInterval > 0 && fragmentInterval <= 10 else { throw SinkError.invalidArgument(name: "fragmentInterval", reason: "\(fragmentInterval) s is outside (0, 10]") }
        for t in tracks {
            switch t {
            case .mjpegVideo(let w, let h):
                guard w > 0, h > 0, w < 65536, h < 65536 else { throw SinkError.invalidArgument(name: "video size", reason: "\(w)x\(h)") }
            case .pcmAudio(let r, let c):
                // The sound requests' own limits (a 96 or 192 kHz card, a 32-channel interface).
                guard r >= 1000, r <= 768_000, c >= 1, c <= 64 else { throw SinkError.invalidArgument(name: "audio format", reason: "\(r) Hz, \(c) channels (supported: 1000–768000 Hz, 1–64 channels)") }
            }
        }
        self.path = path
        self.tracks = tracks
        self.fragmentInterval = fragmentInterval
        self.states = tracks.map {
            switch $0 {
            case .mjpegVideo: return TrackState(timescale: MovieWriter.videoTimescale, isVideo: true)
            case .pcmAudio(let r, _): return TrackState(timescale: UInt32(r), isVideo: false)
            }
        }
        self.file = try OutputFile(path: path, exclusive: !overwrite, regularFile: true)
        do {
            try writeHeader()
        } catch {
            file.discard()
            throw error
        }
    }

    // MARK: Header

    /// `ftyp` and an empty `moov` (sample tables come in fragments); the duration fields are
    /// recorded for patching when the file is finished.
    private func writeHeader() throws {
        var b = BoxBuffer()
        b.begin("ftyp"); b.fourcc("qt  "); b.u32(0x0000_0200); b.fourcc("qt  "); b.end()
        b.begin("moov")
        let now = UInt32(truncatingIfNeeded: UInt64(Date().timeIntervalSince1970) &+ 2_082_844_800)
        b.begin("mvhd"); b.fullBoxHeader(version: 0, flags: 0)
        b.u32(now); b.u32(now); b.u32(MovieWriter.movieTimescale)
        durationPatchOffsets.append((UInt64(b.bytes.count), nil)); b.u32(0)
        b.u32(0x0001_0000); b.u16(0x0100); b.zeros(10); b.matrix(); b.zeros(24)
        b.u32(UInt32(tracks.count + 1))
        b.end()
        for i in tracks.indices { writeTrack(&b, index: i, time: now) }
        writeMovieExtends(&b)
        b.end() // moov
        try b.bytes.withUnsafeBytes { try file.write($0) }
    }

    /// One `trak`: header, media header and handler, and the media information.
    private func writeTrack(_ b: inout BoxBuffer, index i: Int, time now: UInt32) {
        let t = tracks[i]
        b.begin("trak")
        b.begin("tkhd"); b.fullBoxHeader(version: 0, flags: 0x0F)
        b.u32(now); b.u32(now); b.u32(UInt32(i + 1)); b.u32(0)
        durationPatchOffsets.append((UInt64(b.bytes.count), i)); b.u32(0)
        b.zeros(8); b.u16(0); b.u16(0)
        b.u16(t.isVideo ? 0 : 0x0100); b.u16(0)
        if case .mjpegVideo(let w, let h) = t {
            b.matrix(rotation: rotation, width: w, height: h); b.u32(UInt32(w) << 16); b.u32(UInt32(h) << 16)
        } else {
            b.matrix(); b.u32(0); b.u32(0)
        }
        b.end()
        b.begin("mdia")
        // Version 1: a 64-bit duration (32 bits at 90 kHz would overflow after 13 hours).
        b.begin("mdhd"); b.fullBoxHeader(version: 1, flags: 0)
        b.u64(UInt64(now)); b.u64(UInt64(now)); b.u32(states[i].timescale)
        mdhdPatchOffsets.append(UInt64(b.bytes.count)); b.u64(0)
        b.u16(0x7FFF); b.u16(0)  // language: unspecified; quality
        b.end()
        b.begin("hdlr"); b.fullBoxHeader(version: 0, flags: 0)
        b.fourcc("mhlr"); b.fourcc(t.isVideo ? "vide" : "soun"); b.u32(0); b.u32(0); b.u32(0)
        b.pascal(t.isVideo ? "VideoHandler" : "SoundHandler")
        b.end()
        writeMediaInformation(&b, t)
        b.end() // mdia
        b.end() // trak
    }

    /// `minf`: the media header, the data reference (in this file) and empty sample tables.
    private func writeMediaInformation(_ b: inout BoxBuffer, _ t: MovieTrackDescription) {
        b.begin("minf")
        if t.isVideo {
            b.begin("vmhd"); b.fullBoxHeader(version: 0, flags: 1); b.u16(0x40); b.zeros(6); b.end()
        } else {
            b.begin("smhd"); b.fullBoxHeader(version: 0, flags: 0); b.u16(0); b.u16(0); b.end()
        }
        b.begin("hdlr"); b.fullBoxHeader(version: 0, flags: 0)
        b.fourcc("dhlr"); b.fourcc("alis"); b.u32(0); b.u32(0); b.u32(0); b.pascal("DataHandler")
        b.end()
        b.begin("dinf"); b.begin("dref"); b.fullBoxHeader(version: 0, flags: 0); b.u32(1)
        b.begin("alis"); b.fullBoxHeader(version: 0, flags: 1); b.end()
        b.end(); b.end()
        b.begin("stbl")
        writeSampleDescription(&b, t)
        b.begin("stts"); b.fullBoxHeader(version: 0, flags: 0); b.u32(0); b.end()
        b.begin("stsc"); b.fullBoxHeader(version: 0, flags: 0); b.u32(0); b.end()
        b.begin("stsz"); b.fullBoxHeader(version: 0, flags: 0); b.u32(0); b.u32(0); b.end()
        b.begin("stco"); b.fullBoxHeader(version: 0, flags: 0); b.u32(0); b.end()
        b.end() // stbl
        b.end() // minf
    }

    /// `stsd`: Photo-JPEG video or little-endian 16-bit PCM: `sowt` in a version 0 sound
    /// description (its rate is 16.16 fixed point: at most 65535 Hz), or above that rate or two
    /// channels `lpcm` in a version 2 one (QuickTime's: the rate a 64-bit float, the channels a
    /// 32-bit count, the sample layout in flags), as FFmpeg and Apple's players read it.
    private func writeSampleDescription(_ b: inout BoxBuffer, _ t: MovieTrackDescription) {
        b.begin("stsd"); b.fullBoxHeader(version: 0, flags: 0); b.u32(1)
        switch t {
        case .mjpegVideo(let w, let h):
            b.begin("jpeg"); b.zeros(6); b.u16(1)
            b.u16(0); b.u16(0); b.fourcc("VFDR"); b.u32(0); b.u32(0x200)
            b.u16(UInt16(w)); b.u16(UInt16(h)); b.u32(0x0048_0000); b.u32(0x0048_0000)
            b.u32(0); b.u16(1); b.pascal("Photo - JPEG", size: 32); b.u16(24); b.u16(0xFFFF)
            b.end()
        case .pcmAudio(let rate, let channels) where rate <= 65535 && channels <= 2:
            b.begin("sowt"); b.zeros(6); b.u16(1)
            b.u16(0); b.u16(0); b.u32(0)
            b.u16(UInt16(channels)); b.u16(16); b.u16(0); b.u16(0); b.u32(UInt32(rate) << 16)
            b.end()
        case .pcmAudio(let rate, let channels):
            b.begin("lpcm"); b.zeros(6); b.u16(1)
            b.u16(2); b.u16(0); b.u32(0)                       // version 2, revision, vendor
            b.u16(3); b.u16(16); b.u16(0xFFFE); b.u16(0)        // always 3, 16, -2, 0
            b.u32(0x0001_0000)                                  // always 65536
            b.u32(72)                                           // size of the description's struct
            b.u64(Double(rate).bitPattern)                      // sample rate, 64-bit float
            b.u32(UInt32(channels))
            b.u32(0x7F00_0000)                                  // always 0x7F000000
            b.u32(16)                                           // bits per channel
            b.u32(0x4 | 0x8)                                    // signed integer, packed; little-endian
            b.u32(UInt32(2 * channels))                         // bytes per packet (one frame)
            b.u32(1)                                            // frames per packet
            b.end()
        }
        b.end()
    }

    /// `mvex`: the movie is fragmented; `mehd` holds the whole duration (patched at the end).
    private func writeMovieExtends(_ b: inout BoxBuffer) {
        b.begin("mvex")
        b.begin("mehd"); b.fullBoxHeader(version: 0, flags: 0)
        durationPatchOffsets.append((UInt64(b.bytes.count), -1)); b.u32(0)
        b.end()
        for i in tracks.indices {
            b.begin("trex"); b.fullBoxHeader(version: 0, flags: 0)
            b.u32(UInt32(i + 1)); b.u32(1); b.u32(0); b.u32(0); b.u32(0)
            b.end()
        }
        b.end() // mvex
    }

    // MARK: Appending

    private func ticks(_ ns: UInt64, timescale: UInt32) -> UInt64 {
        guard let o = origin else { return 0 }
        let rel = ns > o ? ns - o : 0
        return UInt64((Double(rel) * Double(timescale) / 1e9).rounded())
    }

    /// Sets time zero of the movie (the first video frame's capture time by default).
    public func setOrigin(nanoseconds: UInt64) { if origin == nil { origin = nanoseconds } }

    /// Appends one JPEG image for the video track, taken at `timestampNanoseconds` (capture clock).
    /// May write a fragment.
    public func appendVideo(_ jpeg: UnsafeRawBufferPointer, timestampNanoseconds: UInt64) throws {
        guard let ti = tracks.firstIndex(where: { $0.isVideo }) else { throw SinkError.invalidArgument(name: "track", reason: "the movie has no video track") }
        setOrigin(nanoseconds: timestampNanoseconds)
        let st = states[ti]
        var t = ticks(timestampNanoseconds, timescale: st.timescale)
        if let h = st.held {
            // Timestamps must increase; a repeated or backward timestamp gets one tick.
            if t <= h.ticks { t = h.ticks + 1 }
            let d = UInt32(clamping: t - h.ticks)
            place(st, size: h.size, duration: d)
        } else if st.samplesWritten == 0 && st.sizes.isEmpty {
            st.nextDecodeTime = t
            st.fragmentStart = t
        }
        // The new sample waits at the end of the payload until the next one gives its duration.
        st.payload.append(contentsOf: jpeg)
        st.held = (jpeg.count, t)
        try flushIfDue()
    }

    /// Writes the audio track up to `endNanoseconds` from `aligner` (as far as it holds input):
    /// the aligner's samples for that time, stamped with their place on its timeline
    /// (`origin + first/rate`). `buffer` is scratch space, kept between calls to spare allocations.
    /// What a recording and a dump's export both do with their sound.
    public func appendAudio(from aligner: inout AudioTimelineAligner, upTo endNanoseconds: UInt64, buffer: inout [Int16]) throws {
        buffer.removeAll(keepingCapacity: true)
        let first = aligner.emit(upTo: endNanoseconds, into: &buffer)
        guard !buffer.isEmpty else { return }
        let ts = aligner.origin + UInt64((Double(first) * 1e9 / Double(aligner.sampleRate)).rounded())
        try buffer.withUnsafeBytes { try appendAudio($0, timestampNanoseconds: ts) }
    }

    /// Appends a block of interleaved 16-bit PCM frames for the audio track, whose first frame was
    /// captured at `timestampNanoseconds`. Blocks before the movie's time zero are trimmed.
    public func appendAudio(_ pcm: UnsafeRawBufferPointer, timestampNanoseconds: UInt64) throws {
        guard let ti = tracks.firstIndex(where: { !$0.isVideo }), case .pcmAudio(let rate, let channels) = tracks[ti] else {
            throw SinkError.invalidArgument(name: "track", reason: "the movie has no audio track")
        }
        let bpf = 2 * channels
        guard pcm.count % bpf == 0 else { throw SinkError.invalidArgument(name: "pcm", reason: "\(pcm.count) bytes is not a whole number of \(channels)-channel 16-bit frames") }
        // Time zero is the first video frame; a movie without video starts with its first audio.
        if !tracks.contains(where: { $0.isVideo }) { setOrigin(nanoseconds: timestampNanoseconds) }
        guard let o = origin else { return }  // no video yet: nothing to align with
        let st = states[ti]
        var data = pcm
        var ts = timestampNanoseconds
        if ts < o {
            let skip = Int((Double(o - ts) * Double(rate) / 1e9).rounded()) * bpf
            if skip >= pcm.count { return }
            data = UnsafeRawBufferPointer(rebasing: pcm[skip...])
            ts = o
        }
        let frames = data.count / bpf
        if frames == 0 { return }
        let t = ticks(ts, timescale: UInt32(rate))
        if st.samplesWritten == 0 && st.sizes.isEmpty { st.nextDecodeTime = t; st.fragmentStart = t }
        // Audio stays contiguous: jitter in block timestamps is absorbed, not turned into gaps.
        st.payload += data
        st.sizes.append(UInt32(data.count))
        st.durations.append(UInt32(frames))
        st.nextDecodeTime += UInt64(frames)
        try flushIfDue()
    }

    /// Makes the held sample (already at the end of the payload) a complete one.
    private func place(_ st: TrackState, size: Int, duration: UInt32) {
        st.held = nil
        st.sizes.append(UInt32(size))
        st.durations.append(duration)
        st.lastDuration = duration
        st.nextDecodeTime += UInt64(duration)
    }

    private func flushIfDue() throws {
        let due = states.contains { Double($0.bufferedTicks) / Double($0.timescale) >= fragmentInterval }
        if due { try writeFragment() }
    }

    /// Writes the buffered samples as one fragment now.
    public func writeFragment() throws {
        guard states.contains(where: { !$0.sizes.isEmpty }) else { return }
        var b = BoxBuffer()
        fragmentSequence += 1
        b.begin("moof")
        b.begin("mfhd"); b.fullBoxHeader(version: 0, flags: 0); b.u32(fragmentSequence); b.end()
        var dataOffsetFields: [(Int, Int)] = []  // (field offset in moof, offset in mdat payload)
        var mdatOffset = 0
        for (i, st) in states.enumerated() where !st.sizes.isEmpty {
            b.begin("traf")
            b.begin("tfhd"); b.fullBoxHeader(version: 0, flags: 0x020000); b.u32(UInt32(i + 1)); b.end()
            b.begin("tfdt"); b.fullBoxHeader(version: 1, flags: 0); b.u64(st.fragmentStart); b.end()
            b.begin("trun"); b.fullBoxHeader(version: 0, flags: 0x000001 | 0x000100 | 0x000200)
            b.u32(UInt32(st.sizes.count))
            dataOffsetFields.append((b.bytes.count, mdatOffset)); b.i32(0)
            for k in st.sizes.indices { b.u32(st.durations[k]); b.u32(st.sizes[k]) }
            b.end()
            b.end()
            mdatOffset += st.completeBytes
        }
        b.end() // moof
        let moofSize = b.bytes.count
        for (field, off) in dataOffsetFields { b.patch32(at: field, UInt32(moofSize + 8 + off)) }
        let mdatSize = 8 + mdatOffset
        if mdatSize > Int(UInt32.max) { throw SinkError.invalidArgument(name: "fragment", reason: "larger than 4 GiB") }
        b.u32(UInt32(mdatSize)); b.fourcc("mdat")
        try withPayloads(b.bytes, states.filter { !$0.sizes.isEmpty }) { try file.writev($0) }
        if syncEachFragment { try file.sync() }
        for st in states where !st.sizes.isEmpty {
            st.samplesWritten += UInt64(st.sizes.count)
            st.ticksWritten = st.nextDecodeTime
            st.fragmentStart = st.nextDecodeTime
            st.sizes.removeAll(keepingCapacity: true)
            st.durations.removeAll(keepingCapacity: true)
            // Keep the held sample's bytes (at the end) for the next fragment.
            st.payload.removeFirst(st.completeBytes)
        }
    }

    /// The moof+mdat header followed by the complete samples of each track, as buffers for one writev.
    private func withPayloads<R>(_ header: [UInt8], _ tracks: [TrackState], _ body: ([UnsafeRawBufferPointer]) throws -> R) rethrows -> R {
        var ptrs: [UnsafeRawBufferPointer] = []
        func rec(_ i: Int) throws -> R {
            if i == tracks.count { return try body(ptrs) }
            let n = tracks[i].completeBytes
            return try tracks[i].payload.withUnsafeBytes { p in ptrs.append(UnsafeRawBufferPointer(rebasing: p[0..<n])); return try rec(i + 1) }
        }
        return try header.withUnsafeBytes { h in ptrs.append(h); return try rec(0) }
    }

    /// Writes the held last frame (with the previous frame's duration, or `lastFrameDuration`)
    /// and the remaining samples, then patches the durations in the header.
    public func finish(lastFrameDurationNanoseconds: UInt64? = nil) throws {
        for st in states {
            if let h = st.held {
                var d = st.lastDuration
                // Clamped: a duration beyond the 32-bit field (about 13 h at 90 kHz) is the longest it holds.
                if let ns = lastFrameDurationNanoseconds { d = UInt32(min(Double(UInt32.max), max(1, (Double(ns) * Double(st.timescale) / 1e9).rounded()))) }
                if d == 0 { d = st.timescale / 30 }
                place(st, size: h.size, duration: d)
            }
        }
        try writeFragment()
        try patchDurations()
        try file.sync()
    }

    /// Abandons the buffered samples (after a write error) but keeps what is on disk and patches
    /// the durations of that; best effort.
    public func finishAfterError() {
        for st in states { st.held = nil; st.sizes.removeAll(); st.durations.removeAll(); st.payload.removeAll(); st.nextDecodeTime = st.ticksWritten }
        try? patchDurations()
    }

    private func patchDurations() throws {
        var movieDuration: UInt64 = 0
        var trackDurations: [UInt64] = []
        for (i, st) in states.enumerated() {
            let mediaTicks = st.ticksWritten
            try withUnsafeBytes(of: mediaTicks.bigEndian) { try file.pwrite($0, at: mdhdPatchOffsets[i]) }
            let movieTicks = mediaTicks * UInt64(MovieWriter.movieTimescale) / UInt64(st.timescale)
            trackDurations.append(movieTicks)
            movieDuration = max(movieDuration, movieTicks)
        }
        for (offset, track) in durationPatchOffsets {
            let v: UInt64 = track.map { $0 >= 0 ? trackDurations[$0] : movieDuration } ?? movieDuration
            try withUnsafeBytes(of: UInt32(clamping: v).bigEndian) { try file.pwrite($0, at: offset) }
        }
    }
}
