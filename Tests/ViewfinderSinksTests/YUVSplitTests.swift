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
