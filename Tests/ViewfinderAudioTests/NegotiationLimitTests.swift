import Testing
import Viewfinder
import ViewfinderAudio

/// Sound requests beyond what ALSA's 32-bit parameters hold (found by reading the negotiation
/// while writing the FuzzAudio target): each is a typed error, not a trap in a conversion.
@Suite struct NegotiationLimitTests {
    @Test(arguments: ["rate=4294967296", "rate=9223372036854775807", "channels=4294967296", "period=9223372036854775807", "periods=9223372036854775807"])
    func outOfRangeRequestsAreErrors(_ options: String) throws {
        let source = try ALSACaptureSource(name: "null")
        defer { source.close() }
        let request = try AudioStreamRequest(options: options)
        #expect(throws: (any Error).self) { try source.configure(request) }
    }

    /// An ordinary request still negotiates with the same PCM.
    @Test func anOrdinaryRequestStillNegotiates() throws {
        let source = try ALSACaptureSource(name: "null")
        defer { source.close() }
        let format = try source.configure(try AudioStreamRequest(options: "rate=48000,channels=2,format=s16"))
        #expect(format == AudioStreamFormat(sampleFormat: .s16, sampleRate: 48000, channels: 2))
    }
}
