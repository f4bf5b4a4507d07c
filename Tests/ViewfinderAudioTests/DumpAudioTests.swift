import Foundation
import Testing
import ViewfinderKit

/// The raw dump stores the session's sound beside its frames (version 2 audio records), and reads
/// it back: the same samples, in order, with their positions and capture times.
@Suite(.serialized) struct DumpAudioTests {
    init() { ALSAFixture.install() }

    @Test func aDumpOfSimVideoAndFileSoundReadsBackTheSameSamplesInOrderWithTimestamps() throws {
        let dir = NSTemporaryDirectory() + "vfaudio-dump-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/a.vfdump"
        let session = CaptureSession(registry: .builtIn)
        let camera = try CaptureDevice.open("sim:width=160,height=120,fps=30", directory: .standard)
        let mic = try AudioCaptureDevice.open("vfsig", request: AudioStreamRequest(sampleFormat: .s16, sampleRate: 48000, channels: 2))
        let dump = RawDumpOutput(path: path)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: camera))
        try session.addInput(AudioDeviceInput(device: mic))
        try session.setSessionPreset(.inputPriority)
        try session.addOutput(dump)
        try session.commitConfiguration()
        try session.startRunning()
        usleep(1_500_000)
        session.stopRunning()
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while !dump.isFinished && monotonicNanoseconds() < deadline { usleep(10_000) }
        #expect(dump.error == nil)

        for verify in [false, true] {
            let reader = try RawDumpReader(path: path, verify: verify)
            #expect(reader.version == 2)
            #expect(reader.frameCount > 10)
            #expect(reader.audioEntries.count > 20, "\(reader.audioEntries.count) audio records")
            var bytes: [UInt8] = []
            var previous: DumpAudioPeriod?
            var mismatches = 0
            for i in reader.audioEntries.indices {
                let start = bytes.count
                let p = try reader.readAudio(i, into: &bytes)
                #expect(p.format == AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
                #expect(p.position == reader.audioEntries[i].position && p.timestamp.nanoseconds == reader.audioEntries[i].timestampNanoseconds)
                // The right channel names every frame: the file's frames, in order, none missing.
                bytes[start...].withUnsafeBytes { b in
                    for k in 0..<p.frames {
                        let l = Int16(littleEndian: b.loadUnaligned(fromByteOffset: k * 4, as: Int16.self))
                        let r = Int16(littleEndian: b.loadUnaligned(fromByteOffset: k * 4 + 2, as: Int16.self))
                        let n = Int(p.position) + k
                        if l != ALSAFixture.left(n) || r != ALSAFixture.right(n) { mismatches += 1 }
                    }
                }
                if let q = previous {
                    #expect(p.position == q.position + UInt64(q.frames))
                    #expect(p.timestamp.nanoseconds > q.timestamp.nanoseconds)
                }
                previous = p
            }
            #expect(mismatches == 0)
            // Periods delivered before the stream opened the file are not kept (less than a second).
            #expect((reader.audioEntries.first?.position ?? .max) < 48000)
            // The sound spans the video's time: its stamps are on the frames' clock.
            if let a = reader.audioEntries.first, let f = reader.entries.first {
                #expect(abs(Double(a.timestampNanoseconds) - Double(f.timestampNanoseconds)) < 1e9)
            }
        }
    }
}
