import Foundation
import Testing
import Viewfinder
import ViewfinderKit

/// A test-local ALSA configuration: capture PCMs that read known signals from files (`type file`
/// with an `infile` over a `null` slave), pointed at with ALSA_CONFIG_PATH (the machine's own
/// configuration first, then ours; /etc is never touched).
enum ALSAFixture {
    static let rate = 48000
    /// Seconds in each signal file.
    static let seconds = 8

    /// Left channel: a 440 Hz tone in 100 ms bursts; right channel: a counter (frame number mod
    /// 65536 as a signed sample) that names every frame.
    static func left(_ n: Int) -> Int16 { (n / 4800) % 2 == 0 ? Int16(8000 * sin(2 * Double.pi * 440 * Double(n) / Double(rate))) : 0 }
    static func right(_ n: Int) -> Int16 { Int16(truncatingIfNeeded: n % 65536 - 32768) }

    static let directory: String = {
        let dir = NSTemporaryDirectory() + "vfaudio-\(getpid())"
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let n = rate * seconds
        var s16 = [Int16](repeating: 0, count: 2 * n)
        var s32 = [Int32](repeating: 0, count: 2 * n)
        var f32 = [Float](repeating: 0, count: 2 * n)
        for i in 0..<n {
            s16[2 * i] = left(i); s16[2 * i + 1] = right(i)
            s32[2 * i] = Int32(left(i)) << 16; s32[2 * i + 1] = Int32(right(i)) << 16
            f32[2 * i] = Float(left(i)) / 32768; f32[2 * i + 1] = Float(right(i)) / 32768
        }
        _ = FileManager.default.createFile(atPath: dir + "/s16.raw", contents: s16.withUnsafeBytes { Data($0) })
        _ = FileManager.default.createFile(atPath: dir + "/s32.raw", contents: s32.withUnsafeBytes { Data($0) })
        _ = FileManager.default.createFile(atPath: dir + "/f32.raw", contents: f32.withUnsafeBytes { Data($0) })
        var conf = "pcm.vfnull { type null }\n"
        for (name, file) in [("vfsig", "s16"), ("vfsig32", "s32"), ("vfsigfloat", "f32")] {
            conf += "pcm.\(name) { type file\n slave.pcm \"vfnull\"\n file \"/dev/null\"\n infile \"\(dir)/\(file).raw\"\n format \"raw\" }\n"
        }
        // A PCM whose open blocks: its infile a FIFO that has no writer.
        mkfifo(dir + "/fifo", 0o600)
        conf += "pcm.vffifo { type file\n slave.pcm \"vfnull\"\n file \"/dev/null\"\n infile \"\(dir)/fifo\"\n format \"raw\" }\n"
        _ = FileManager.default.createFile(atPath: dir + "/asound.conf", contents: Data(conf.utf8))
        return dir
    }()

    /// The frame number of the fixture's frame at `k` in `samples` (interleaved stereo S16), or nil
    /// if the frames from `k` on are not the fixture's. The right channel counts modulo 65536 only
    /// (1.37 s), so a recording that starts later into the file (a camera slow to start: the
    /// movie drops the sound before its first frame) needs the lap: the left channel's tone follows
    /// the frame number itself, and the next 9600 frames (a burst and a pause) must match it.
    static func frameNumber(at k: Int, in samples: [Int16]) -> Int? {
        guard 2 * k + 1 < samples.count else { return nil }
        let base = Int(samples[2 * k + 1]) + 32768
        let check = min(9600, samples.count / 2 - k)
        for lap in 0...(rate * seconds / 65536) {
            let n = base + 65536 * lap
            if (0..<check).allSatisfy({ samples[2 * (k + $0)] == left(n + $0) && samples[2 * (k + $0) + 1] == right(n + $0) }) { return n }
        }
        return nil
    }

    /// Points ALSA at the fixture (idempotent).
    static func install() {
        setenv("ALSA_CONFIG_PATH", "/usr/share/alsa/alsa.conf:" + directory + "/asound.conf", 1)
    }
}

/// Keeps everything an audio engine delivers.
final class CollectingConsumer: AudioConsumer, @unchecked Sendable {
    private let box = LockedBox(State())
    struct State {
        var format: AudioStreamFormat?
        var samples: [Int16] = []
        var periods: [AudioPeriod] = []
        var finished = false
        var error: String?
    }
    let delay: UInt32
    init(delayMicroseconds: UInt32 = 0) { delay = delayMicroseconds }
    var state: State { box.withLock { $0 } }
    func prepareAudio(format: AudioStreamFormat) { box.withLock { $0.format = format } }
    func consumeAudio(_ b: AudioBuffer) {
        var s: [Int16] = []
        AudioSamples.appendS16(b.data, format: b.format.sampleFormat, to: &s)
        box.withLock { $0.samples += s; $0.periods.append(b.period) }
        if delay > 0 { usleep(delay) }
    }
    func finishAudio(error: (any Error)?) { box.withLock { $0.finished = true; $0.error = error.map { "\($0)" } } }
}

/// The samples of a sound track in a movie Viewfinder wrote (fragmented MOV: `moof` boxes whose
/// `trun`s point, relative to the `moof`, at sample data), with no decoder.
func movieAudioSamples(_ path: String, track: UInt32 = 2) throws -> [Int16] {
    let d = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    func u32(_ o: Int) -> Int { Int(d[o]) << 24 | Int(d[o + 1]) << 16 | Int(d[o + 2]) << 8 | Int(d[o + 3]) }
    func fourcc(_ o: Int) -> String { String(decoding: d[o..<(o + 4)], as: UTF8.self) }
    var out: [Int16] = []
    var o = 0
    while o + 8 <= d.count {
        let size = u32(o)
        guard size >= 8, o + size <= d.count else { break }
        if fourcc(o + 4) == "moof" {
            var t = o + 8
            while t < o + size {
                let ts = u32(t)
                if fourcc(t + 4) == "traf" {
                    var id: UInt32 = 0
                    var b = t + 8
                    while b < t + ts {
                        let bs = u32(b)
                        if fourcc(b + 4) == "tfhd" { id = UInt32(u32(b + 12)) }
                        if fourcc(b + 4) == "trun", id == track {
                            let count = u32(b + 12)
                            var at = o + u32(b + 16)
                            for k in 0..<count {
                                let sz = u32(b + 20 + 8 * k + 4)
                                for j in stride(from: 0, to: sz, by: 2) { out.append(Int16(bitPattern: UInt16(d[at + j]) | UInt16(d[at + j + 1]) << 8)) }
                                at += sz
                            }
                        }
                        b += bs
                    }
                }
                t += ts
            }
        }
        o += size
    }
    return out
}

/// Runs a program; returns its exit status and standard output.
func runTool(_ path: String, _ args: [String]) throws -> (Int32, String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    let pipe = Pipe()
    p.standardOutput = pipe
    p.standardError = FileHandle.nullDevice
    try p.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// Stream durations by ffprobe (nil when ffprobe is missing).
func ffprobeDurations(_ path: String) throws -> (video: Double, audio: Double)? {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/ffprobe") else { return nil }
    let (rc, out) = try runTool("/usr/bin/ffprobe", ["-v", "error", "-show_entries", "stream=codec_type,duration", "-of", "csv=p=0", path])
    guard rc == 0 else { return nil }
    var v = 0.0, a = 0.0
    for line in out.split(separator: "\n") {
        let f = line.split(separator: ",")
        guard f.count == 2, let x = Double(f[1]) else { continue }
        if f[0] == "video" { v = x } else if f[0] == "audio" { a = x }
    }
    return (v, a)
}

/// A session of the sim camera (`camera`, a sim device string) and the file PCM `vfsig` (48 kHz
/// stereo S16: its frames are numbered, see ``ALSAFixture``) into `outputs`, configured.
func simWithFileSound(_ camera: String, outputs: [any CaptureOutput], periodFrames: Int? = nil) throws -> CaptureSession {
    let session = CaptureSession(registry: .builtIn)
    let device = try CaptureDevice.open(camera, directory: .standard)
    var request = AudioStreamRequest(sampleFormat: .s16, sampleRate: 48000, channels: 2)
    if let periodFrames { request.periodFrames = periodFrames; request.periods = 4 }
    let mic = try AudioCaptureDevice.open("vfsig", request: request)
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: device))
    try session.addInput(AudioDeviceInput(device: mic))
    try session.setSessionPreset(.inputPriority)
    for o in outputs { try session.addOutput(o) }
    try session.commitConfiguration()
    return session
}
