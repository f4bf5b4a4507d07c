import Testing
import CV4L2
import CViewfinderKernels
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// A camera whose YUV is limited range (a UVC webcam's YUYV: colorspace sRGB, quantization left at
/// its default, which for YUV means 16–235/16–240) has it stretched to the full range the engine's
/// YUV is everywhere else (JPEG's), so stills, movies and `to_bgr()` get real blacks and whites.
@Suite struct QuantizationTests {
    static let srgb: UInt32 = 8, jpeg: UInt32 = 7, limited: UInt32 = 2, full: UInt32 = 1

    /// One frame of `format` from a fake camera reporting `colorspace`/`quantization`, every buffer
    /// filled with `pattern` repeated; its bytes and whether the camera said it stretches.
    func capture(_ format: PixelFormat, colorspace: UInt32, quantization: UInt32, pattern: [UInt8],
                 options: V4L2Camera.Options = .init()) throws -> (bytes: [UInt8], expands: Bool, format: FrameFormat) {
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.colorspace = colorspace
        spec.quantization = quantization
        let k = makeKernel([spec])
        let cam = try makeCamera(k, options: options)
        defer { cam.close() }
        let c = try cam.configure(StreamRequest(pixelFormat: format, width: 320, height: 240))
        try cam.start()
        k.setPayload { buf, _ in
            for i in 0..<buf.count { buf[i] = pattern[i % pattern.count] }
            return c.format.maxByteCount
        }
        k.produce(1)
        let f = try #require(expectFrame(try nextEvent(cam)))
        defer { f.release() }
        let bytes = [UInt8](UnsafeRawBufferPointer(start: f.data, count: f.bytesUsed))
        return (bytes, cam.expandsLimitedRange, c.format)
    }

    @Test func aWebcamsDefaultYUYVIsStretchedToFullRange() throws {
        // Y 16, Cb 16, Y 235, Cr 240 | Y 126, Cb 128, Y 126, Cr 184
        let r = try capture(.yuyv, colorspace: Self.srgb, quantization: 0, pattern: [16, 16, 235, 240, 126, 128, 126, 184])
        #expect(r.expands)
        #expect(Array(r.bytes.prefix(8)) == [0, 1, 255, 255, 128, 128, 128, 192])
        // The whole frame, not only its start.
        #expect(Array(r.bytes.suffix(8)) == [0, 1, 255, 255, 128, 128, 128, 192])
        // Below black and above white clip; grey stays grey.
        let c = try capture(.yuyv, colorspace: Self.srgb, quantization: Self.limited, pattern: [0, 0, 255, 255, 8, 128, 250, 128])
        #expect(Array(c.bytes.prefix(8)) == [0, 0, 255, 255, 0, 128, 255, 128])
    }

    @Test func planarLimitedRangeStretchesLumaAndChromaPlanesEachByItsScale() throws {
        let r = try capture(.nv12, colorspace: Self.srgb, quantization: Self.limited, pattern: [235])
        let luma = r.format.plane(0), chroma = r.format.plane(1)
        #expect(r.expands)
        #expect(r.bytes[0] == 255 && r.bytes[luma.byteCount - 1] == 255)
        // 235 as chroma is 107 above neutral: 107 × 255/224 = 121.8, so 250.
        #expect(r.bytes[chroma.offset] == 250 && r.bytes[chroma.offset + chroma.byteCount - 1] == 250)
    }

    @Test func fullRangeJPEGColorspaceAndUnsaidRangesAreLeftAlone() throws {
        let pattern: [UInt8] = [16, 16, 235, 240]
        for (cs, q) in [(Self.srgb, Self.full), (Self.jpeg, 0), (0, 0)] as [(UInt32, UInt32)] {
            let r = try capture(.yuyv, colorspace: cs, quantization: q, pattern: pattern)
            #expect(!r.expands, "colorspace \(cs) quantization \(q)")
            #expect(Array(r.bytes.prefix(4)) == pattern, "colorspace \(cs) quantization \(q)")
        }
        // Monochrome sensors leave the default and deliver the whole range: grey is stretched only
        // when the driver says limited.
        let g = try capture(.grey, colorspace: Self.srgb, quantization: 0, pattern: [16, 235])
        #expect(!g.expands && Array(g.bytes.prefix(2)) == [16, 235])
        let l = try capture(.grey, colorspace: Self.srgb, quantization: Self.limited, pattern: [16, 235])
        #expect(l.expands && Array(l.bytes.prefix(2)) == [0, 255])
    }

    @Test func theOptionKeepsTheDriversBytes() throws {
        var o = V4L2Camera.Options()
        o.expandLimitedRange = false
        let r = try capture(.yuyv, colorspace: Self.srgb, quantization: Self.limited, pattern: [16, 16, 235, 240], options: o)
        #expect(!r.expands)
        #expect(Array(r.bytes.prefix(4)) == [16, 16, 235, 240])
        // The same from the device string.
        var spec = FakeV4L2Kernel.DeviceSpec.webcam()
        spec.colorspace = Self.srgb
        spec.quantization = Self.limited
        let k = makeKernel([spec])
        let provider = V4L2Provider(syscalls: k)
        for (device, expands) in [("/dev/video0,range=keep", false), ("/dev/video0,range=full", true), ("/dev/video0", true)] {
            let cam = try #require(try provider.open(device) as? V4L2Camera)
            _ = try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 320, height: 240))
            #expect(cam.expandsLimitedRange == expands, "\(device)")
            cam.close()
        }
        #expect(throws: DeviceError.invalidDeviceOption(device: "/dev/video0,range=tv", option: "range", reason: "'tv' is not keep or full")) {
            _ = try provider.open("/dev/video0,range=tv")
        }
    }

    @Test func theKernelMatchesTheFormulaForEveryValue() {
        var y = [UInt8](0...255), c = [UInt8](0...255)
        y.withUnsafeMutableBufferPointer { vf_expand_limited_range($0.baseAddress, 256, 0) }
        c.withUnsafeMutableBufferPointer { vf_expand_limited_range($0.baseAddress, 256, 1) }
        for v in 0...255 {
            let ly = (Double(v) - 16) * 255 / 219, lc = (Double(v) - 128) * 255 / 224 + 128
            #expect(abs(Double(y[v]) - min(255, max(0, ly))) <= 0.5 + 1e-9, "luma \(v)")
            #expect(abs(Double(c[v]) - min(255, max(0, lc))) <= 0.5 + 1e-9, "chroma \(v)")
        }
        #expect(c[128] == 128)
    }
}
