// Sound format negotiation: the `--audio DEVICE,rate=…,channels=…,format=…,period=…,periods=…`
// options a user types, parsed and negotiated with an ALSA device (ALSA's `null` PCM, which
// accepts what a kernel card would be asked: hardware parameters are negotiated the same way).
import FuzzSupport
import Glibc
import ViewfinderKit

@main enum FuzzAudio {
    static func main() {
        FuzzSeeds.handle(makeSeeds)
        let source = try! ALSACaptureSource(name: "null")
        FuzzDriver.run { data in
            let text = String(decoding: data, as: UTF8.self)
            guard let request = try? AudioStreamRequest(options: text) else { return }
            _ = try? source.configure(request)
            source.close()
        }
    }

    static func makeSeeds(_ dir: String) throws {
        let seeds = ["rate=48000,channels=2,format=s16,period=480,periods=8", "rate=44100,channels=1,format=float",
                     "format=s32,period=64,periods=2", "rate=8000", "channels=8,periods=64"]
        for (i, s) in seeds.enumerated() { try FuzzSeeds.write(Array(s.utf8), to: dir, name: "seed\(i)") }
    }
}
