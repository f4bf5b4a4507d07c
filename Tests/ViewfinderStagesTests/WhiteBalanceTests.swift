import Testing
import Foundation
import Viewfinder
import ViewfinderSim
@testable import ViewfinderStages

@Suite("White balance")
struct WhiteBalanceTests {
    /// Runs the white-balance stage on the sim camera; returns the last frame's estimate.
    static func run(_ device: String, options: String, frames: Int = 40, simAutoOff: Bool = false) throws -> (estimate: Double, truth: Double, trace: [Double]) {
        let spec = try #require(try StageSpec.parseList("white_balance:" + options).first)
        let stage = try #require(try WhiteBalanceStage.make(options: spec.options) as? WhiteBalanceStage)
        var last = 0.0, truth = 0.0, trace: [Double] = []
        try runSim(device, width: 320, height: 180, frames: frames, stages: [stage]) { _, f in
            last = f.metadata.whiteBalance ?? .nan
            truth = f.metadata.truth?.colorTemperature ?? .nan
            trace.append(last)
        }
        return (last, truth, trace)
    }

    @Test("debug")
    func debug() throws {
        let r = try Self.run("sim:colortemp=3000,paced=false", options: "mode=continuous")
        print(r.trace)
        let cam = try SimCamera(deviceString: "sim:colortemp=3000,paced=false,width=320,height=180,format=yuv422p")
        let cfg = try cam.configure(StreamRequest(pixelFormat: .yuv422p, width: 320, height: 180, fps: 30))
        let wr = try Y4MWriter(path: "/tmp/cast.y4m", format: cfg.format, interval: cfg.interval)
        try cam.simControls.set("white_balance_automatic", to: 0)
        try cam.simControls.set("white_balance_temperature", to: 5200)
        try cam.start()
        defer { cam.stop() }
        for _ in 0..<4 {
            guard case .frame(let f) = try cam.next(timeoutNanoseconds: 2_000_000_000) else { continue }
            let px = f.pixels!
            var su = 0.0, sv = 0.0, n = 0.0
            for y in 0..<px.cb!.height { for x in 0..<px.cb!.width { su += Double(px.cb![x, y]); sv += Double(px.cr![x, y]); n += 1 } }
            print(f.metadata.whiteBalance as Any, su / n, sv / n, WhiteBalanceEstimator().measure(px, balance: f.metadata.whiteBalance!, options: WhiteBalanceOptions()) as Any)
            try wr.write(f)
            f.release()
        }
        try wr.flush(); wr.close()
    }
}
