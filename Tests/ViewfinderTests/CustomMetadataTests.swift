import Testing
import Foundation
@testable import Viewfinder

/// Sets `keys` custom metadata keys on every frame (a user's stage publishing many measures).
final class ManyKeysStage: Stage {
    static let name = "many_keys"
    static let summary = "Sets many custom metadata keys."
    struct Options: StageOptions {
        var keys = 40
        init() {}
        static var fields: [OptionField<Options>] { [.int("keys", \.keys, range: 1...64, "keys per frame")] }
    }
    let keys: [MetadataKey]
    init(options: Options) { keys = (0..<options.keys).map { MetadataKey("test.k\($0)") } }
    func process(_ frame: Frame) -> StageVerdict {
        for (i, k) in keys.enumerated() { frame.metadata.custom.set(k, Double(i)) }
        return .forward
    }
}

@Suite struct CustomMetadataTests {
    @Test func thirtyTwoKeysAreKeptAndTheThirtyThirdIsCountedNotLostSilently() {
        var m = CustomMetadata()
        for i in 0..<CustomMetadata.capacity { let stored = m.set(MetadataKey("cm.k\(i)"), Double(i)); #expect(stored) }
        #expect(m.count == 32 && m.refused == 0)
        let extraStored = m.set(MetadataKey("cm.extra"), 1)
        #expect(!extraStored)
        #expect(m.refused == 1)
        #expect(m.value(MetadataKey("cm.extra")) == nil)
        // A key already there is updated even when full.
        let updated = m.set(MetadataKey("cm.k31"), 99)
        #expect(updated)
        #expect(m.value(MetadataKey("cm.k31")) == 99 && m.value(MetadataKey("cm.k0")) == 0)
        #expect(m.entries.count == 32 && m.entries.last?.1 == 99)
        m.removeAll()
        #expect(m.count == 0 && m.refused == 0)
    }

    @Test func framesWithRefusedKeysAreCountedByTheEngineAndMarkedInTheMetadataLines() throws {
        let src = try PatternSource(deviceString: "pattern:width=64,height=32,frames=5")
        let cfg = try src.configure(StreamRequest(pixelFormat: src.options.format, width: 64, height: 32, fps: src.options.fps, bufferCount: src.options.poolSize))
        var o = ManyKeysStage.Options(); o.keys = 40
        let path = NSTemporaryDirectory() + "vf-many-keys-\(getpid()).jsonl"
        defer { unlink(path) }
        let writer = MetadataWriter(path: path)
        let e = CaptureEngine(source: src, configuration: cfg, stages: [ManyKeysStage(options: o)], consumers: [writer])
        try e.start()
        #expect(e.waitUntilFinished(timeoutSeconds: 30))
        #expect(e.statistics.delivered == 5)
        #expect(e.statistics.framesWithRefusedMetadata == 5)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 5)
        for l in lines {
            #expect(l.contains("\"test.k31\":31.0") && !l.contains("test.k32"))
            #expect(l.contains("\"custom_refused\":8"))
        }
        // Within the capacity nothing is refused.
        let src2 = try PatternSource(deviceString: "pattern:width=64,height=32,frames=3")
        let cfg2 = try src2.configure(StreamRequest(pixelFormat: src2.options.format, width: 64, height: 32, fps: src2.options.fps, bufferCount: src2.options.poolSize))
        o.keys = 20
        let e2 = CaptureEngine(source: src2, configuration: cfg2, stages: [ManyKeysStage(options: o)], consumers: [CollectingConsumer()])
        try e2.start()
        #expect(e2.waitUntilFinished(timeoutSeconds: 30))
        #expect(e2.statistics.framesWithRefusedMetadata == 0)
    }
}

@Suite struct AudioStatisticsCodingTests {
    @Test func statisticsEncodedBeforeTheRunsPeakWasAddedStillDecode() throws {
        var s = AudioStatistics()
        s.frames = 480; s.peakDBFS = -6; s.maximumPeakDBFS = -3
        let now = try JSONDecoder().decode(AudioStatistics.self, from: try JSONEncoder().encode(s))
        #expect(now == s)
        // As encoded before `maximumPeakDBFS`: that key absent, the meter's peak stands in.
        let old = #"{"frames":480,"periods":1,"overruns":0,"framesLost":0,"ringDrops":0,"softwareTimestamps":0,"selfPaced":false,"peakDBFS":-6,"measuredPPM":0,"measuredRate":48000}"#
        let back = try JSONDecoder().decode(AudioStatistics.self, from: Data(old.utf8))
        #expect(back.frames == 480 && back.peakDBFS == -6 && back.maximumPeakDBFS == -6 && back.error == nil)
    }
}
