import CViewfinderKernels
import Testing
import Viewfinder
import ViewfinderSinks

@Suite("YUV split", .serialized)
struct YUVSplitTests {
    @Test("packed 4:2:2 splits into planes, the portable and AVX2 builds alike", arguments: [YUVSplit.Packed422Order.yuyv, .uyvy])
    func packed422(_ order: YUVSplit.Packed422Order) {
        for (w, h, pad) in [(1922, 5, 8), (30, 3, 0), (64, 2, 2)] {
            let bpr = 2 * w + pad
            var src = [UInt8](repeating: 0, count: bpr * h)
            for i in src.indices { src[i] = UInt8(truncatingIfNeeded: i &* 2_654_435_761 >> 7) }
            func split(lumaOnly: Bool) -> [UInt8] {
                var y = [UInt8](repeating: 0, count: w * h), u = [UInt8](repeating: 0, count: w / 2 * h), v = u
                src.withUnsafeBufferPointer { s in
                    y.withUnsafeMutableBufferPointer { yb in
                        u.withUnsafeMutableBufferPointer { ub in
                            v.withUnsafeMutableBufferPointer { vb in
                                YUVSplit.packed422(s.baseAddress!, bytesPerRow: bpr, width: w, height: h, order: order, y: yb.baseAddress!,
                                                   u: lumaOnly ? nil : ub.baseAddress, v: lumaOnly ? nil : vb.baseAddress)
                            }
                        }
                    }
                }
                return y + u + v
            }
            // Reference: the byte layout read directly.
            let (yo, uo) = order == .yuyv ? (0, 1) : (1, 0)
            var ref: [UInt8] = []
            for r in 0..<h { for x in 0..<w { ref.append(src[r * bpr + 2 * x + yo]) } }
            for r in 0..<h { for x in 0..<(w / 2) { ref.append(src[r * bpr + 4 * x + uo]) } }
            for r in 0..<h { for x in 0..<(w / 2) { ref.append(src[r * bpr + 4 * x + uo + 2]) } }
            vf_kernels_force_portable(1)
            let portable = split(lumaOnly: false), portableLuma = split(lumaOnly: true)
            vf_kernels_force_portable(0)
            let best = split(lumaOnly: false), bestLuma = split(lumaOnly: true)
            #expect(portable == ref && best == ref, "\(order) \(w)x\(h)")
            #expect(portableLuma.prefix(w * h) == ref.prefix(w * h) && bestLuma == portableLuma)
        }
    }
}

@Suite("JPEG from packed 4:2:2")
struct PackedJPEGTests {
    /// The strip-at-a-time encode of packed rows must give exactly the bytes of TurboJPEG's
    /// `tjCompressFromYUVPlanes` on planes split beforehand (the 4:2:2 planar path of the encoder),
    /// at sizes that are and are not multiples of the 16x8 MCU, with padded rows, both byte orders.
    @Test("packed encode is byte-identical to split + tjCompressFromYUVPlanes", arguments: [PixelFormat.yuyv, .uyvy])
    func byteIdentical(_ pf: PixelFormat) throws {
        let encoder = try JPEGEncoder()
        for (w, h, pad, q) in [(64, 48, 0, 85), (650, 483, 6, 85), (644, 17, 0, 50), (2, 1, 0, 90), (1920, 1080, 0, 85), (320, 240, 64, 97)] {
            let packed = FrameFormat(pf, width: w, height: h, bytesPerRow: 2 * w + pad)
            let frame = Frame(capacity: packed.maxByteCount, format: packed)
            fillFrame(frame, index: w + h, noise: 20)
            let planarFormat = FrameFormat(.yuv422p, width: w, height: h)
            var planes = [UInt8](repeating: 0, count: planarFormat.maxByteCount)
            planes.withUnsafeMutableBufferPointer { b in
                let y = b.baseAddress!, u = y + planarFormat.plane(1).offset, v = y + planarFormat.plane(2).offset
                YUVSplit.packed422(frame.data.assumingMemoryBound(to: UInt8.self), bytesPerRow: packed.bytesPerRow, width: w, height: h,
                                   order: pf == .yuyv ? .yuyv : .uyvy, y: y, u: u, v: v)
            }
            let fromPacked = try withExtendedLifetime(encoder) { Array(try encoder.encode(frame, quality: q)) }
            let fromPlanes = try withExtendedLifetime(encoder) {
                try planes.withUnsafeBytes { Array(try encoder.encode($0.baseAddress!, byteCount: $0.count, format: planarFormat, quality: q, subsampling: .s422)) }
            }
            #expect(fromPacked.count > 100)
            #expect(fromPacked == fromPlanes, "\(pf) \(w)x\(h) stride \(packed.bytesPerRow) q\(q): \(fromPacked.count) vs \(fromPlanes.count) bytes")
            let header = try JPEGDecoder().header(fromPacked.withUnsafeBytes { $0 })
            #expect(header.width == w && header.height == h && header.subsampling == .s422)
        }
    }

    @Test("packed encode refuses bad input with a typed error")
    func refusesBadInput() throws {
        let encoder = try JPEGEncoder()
        let f = FrameFormat(.yuyv, width: 64, height: 8)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        #expect(throws: SinkError.self) { _ = try encoder.encode(frame.data, byteCount: f.maxByteCount, format: f, quality: 0) }
        #expect(throws: SinkError.self) { _ = try encoder.encode(frame.data, byteCount: f.maxByteCount - 1, format: f, quality: 85) }
    }
}
