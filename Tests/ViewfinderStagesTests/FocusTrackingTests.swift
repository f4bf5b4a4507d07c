import Testing
import Viewfinder
@testable import ViewfinderStages

/// The focus window follows the picture under the camera's shake (``FocusWindowTracker``).
@Suite("Autofocus window tracking")
struct FocusTrackingTests {
    let format = FrameFormat(.grey, width: 320, height: 240)

    /// Uneven detail: noise whose contrast grows down the picture across the focus window (scene
    /// rows 160–250; a lawn below flowers), so a vertical shift alone changes a still window's
    /// focus score.
    static func scene(_ x: Int, _ y: Int) -> UInt8 {
        var h = UInt64(bitPattern: Int64(x &* 73_856_093 ^ y &* 19_349_663)) &* 0x9E37_79B9_7F4A_7C15
        h ^= h >> 29
        let n = Double(h & 0xFF) / 255 - 0.5
        let amp = 20 + 2.2 * Double(min(max(y - 160, 0), 90))
        return UInt8(max(0, min(255, (110 + amp * n).rounded())))
    }

    func frame(dx: Int, dy: Int, noise: Int = 0, seed: Int = 0) -> Frame {
        let f = Frame(capacity: format.maxByteCount, format: format)
        let p = f.data.assumingMemoryBound(to: UInt8.self)
        var r = UInt32(truncatingIfNeeded: seed &* 2_654_435_761 | 1)
        for y in 0..<format.height {
            for x in 0..<format.width {
                var v = Int(Self.scene(x - dx + 40, y - dy + 80))
                if noise > 0 { r ^= r << 13; r ^= r >> 17; r ^= r << 5; v += Int(r % UInt32(2 * noise + 1)) - noise }
                p[y * format.width + x] = UInt8(max(0, min(255, v)))
            }
        }
        f.bytesUsed = format.maxByteCount
        return f
    }

    /// The tracker on `frame`, kept alive while its luma is read (a `LumaView` does not retain it).
    func track(_ t: inout FocusWindowTracker, _ frame: Frame, _ base: PixelRect) throws -> PixelRect {
        let luma = try #require(LumaView(frame))
        return withExtendedLifetime(frame) { t.track(luma, base: base) }
    }

    @Test("the tracker finds the picture's shift within its radius, with sensor noise, and re-anchors beyond it")
    func tracksShifts() throws {
        var t = FocusWindowTracker(radius: 8)
        let base = PixelRect(x: 112, y: 84, width: 96, height: 72)
        let ref = frame(dx: 0, dy: 0)
        #expect(try track(&t, ref, base) == base)
        for (dx, dy) in [(3, -2), (-5, 4), (0, 7), (-8 + 1, -6), (2, 0)] {
            let w = try track(&t, frame(dx: dx, dy: dy, noise: 4, seed: dx * 31 + dy), base)
            #expect(t.offsetX == dx && t.offsetY == dy, "shift \(dx), \(dy): found \(t.offsetX), \(t.offsetY)")
            #expect(w == PixelRect(x: base.x + dx, y: base.y + dy, width: base.width, height: base.height))
        }
        // A pan beyond the search: measured where the window is at rest, from a new reference.
        #expect(try track(&t, frame(dx: 20, dy: 0), base) == base)
        #expect(t.reanchors == 1)
        _ = try track(&t, frame(dx: 23, dy: 1), base)
        #expect(t.offsetX == 3 && t.offsetY == 1)
        // Too small a window is not tracked.
        var s = FocusWindowTracker(radius: 8)
        let small = PixelRect(x: 100, y: 100, width: 40, height: 40)
        _ = try track(&s, ref, small)
        #expect(try track(&s, frame(dx: 3, dy: 3), small) == small)
    }

    @Test("the stage's score over a shaken picture of uneven detail: steady with tracking, swinging without")
    func stageScoreFollowsThePicture() throws {
        func scores(track: Bool) throws -> [Double] {
            var o = FocusOptions()
            o.mode = .locked
            o.track = track
            let stage = FocusStage(options: o)
            try stage.prepare(format: format, context: StageContext(format: format))
            var out: [Double] = []
            for (i, (dx, dy)) in [(0, 0), (2, -3), (-4, 5), (1, 5), (-3, -5), (4, 2), (0, -4), (-2, 3)].enumerated() {
                let f = frame(dx: dx, dy: dy, noise: 2, seed: i)
                _ = stage.process(f)
                out.append(try #require(f.metadata.focus).tenengrad)
            }
            return out
        }
        func spread(_ v: [Double]) -> Double { (v.max()! - v.min()!) / v.min()! }
        let still = try scores(track: false), tracked = try scores(track: true)
        #expect(spread(still) > 0.1, "\(still)")
        #expect(spread(tracked) < spread(still) / 5, "tracked \(tracked), still \(still)")
    }
}
