import Testing
import Viewfinder
import ViewfinderAudio

/// Sound requests beyond what ALSA's 32-bit parameters hold (found by reading the negotiation
/// while writing the FuzzAudio target): each is a typed error, not a trap in a conversion.
@Suite struct NegotiationLimitTests {
    /// 1 Dec sweep: `rate=48000,rate=44100` took the last silently; device and stage options refuse it.
    @Test func aKeyGivenTwiceIsRefused() throws {
        #expect(throws: AudioError.invalidRequest("rate given twice")) { _ = try AudioStreamRequest(options: "rate=48000,rate=44100") }
        #expect(throws: AudioError.invalidRequest("channels given twice")) { _ = try AudioStreamRequest(options: "channels=2,format=s16,channels=2") }
        #expect(try AudioStreamRequest(options: "rate=48000,channels=2").sampleRate == 48000)
    }

    @Test(arguments: ["rate=4294967296", "rate=9223372036854775807", "channels=4294967296", "period=9223372036854775807", "periods=9223372036854775807"])
    func outOfRangeRequestsAreErrors(_ options: String) throws {
        // The parser refuses them (a usage error on the command line)…
        #expect(throws: AudioError.self) { _ = try AudioStreamRequest(options: options) }
        // …and a request built in code with the same values is refused by the negotiation.
        let kv = options.split(separator: "=").map(String.init)
        let v = try #require(Int(kv[1]))
        var request = AudioStreamRequest()
        switch kv[0] {
        case "rate": request.sampleRate = v
        case "channels": request.channels = v
        case "period": request.periodFrames = v
        default: request.periods = v
        }
        let source = try ALSACaptureSource(name: "null")
        defer { source.close() }
        #expect(throws: (any Error).self) { try source.configure(request) }
    }

    /// Requests no sound card serves (a bad-input sweep, 29 Nov): a 1 Hz rate hung the run past
    /// Ctrl-C (one period every 8 minutes), a million channels crashed allocating 62 GB.
    @Test(arguments: ["rate=1", "rate=999", "rate=1000000", "channels=0", "channels=65", "channels=1000000", "period=8", "periods=1", "rate=8000,period=16000"])
    func requestsNoSoundCardServesAreRefusedByTheParser(_ options: String) {
        #expect(throws: AudioError.self) { _ = try AudioStreamRequest(options: options) }
    }

    @Test func aRequestBuiltInCodeIsHeldToTheSameLimits() throws {
        var request = AudioStreamRequest()
        request.channels = 1_000_000   // the null plugin takes it: 62 GB of buffers
        let source = try ALSACaptureSource(name: "null")
        defer { source.close() }
        #expect(throws: AudioError.self) { try source.configure(request) }
    }

    @Test func ordinaryRequestsParse() throws {
        for o in ["rate=8000,channels=1", "rate=48000,channels=2,format=s16,period=480,periods=4", "rate=768000,channels=64", "rate=44100,period=1024,periods=2"] {
            _ = try AudioStreamRequest(options: o)
        }
    }

    /// An ordinary request still negotiates with the same PCM.
    @Test func anOrdinaryRequestStillNegotiates() throws {
        let source = try ALSACaptureSource(name: "null")
        defer { source.close() }
        let format = try source.configure(try AudioStreamRequest(options: "rate=48000,channels=2,format=s16"))
        #expect(format == AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
    }
}
