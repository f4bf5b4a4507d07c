// The test of "Writing a stage", Step 8, as the article shows it: `scripts/test-url-dependency.sh`
// runs it in a package that depends on Viewfinder by URL, so the article's code compiles for a user.
import Testing
import Viewfinder
@testable import MyStages

@Test func negativeInvertsLuma() throws {
    let format = FrameFormat(.grey, width: 64, height: 32)
    let pool = FramePool(format: format, count: 4)
    let chain = StageChain(stages: [Negative(options: .init())], drops: DropCounters())
    var out: [UInt8] = []
    try chain.prepare(format: format, context: StageContext(format: format)) { frame in
        out.append(frame.data.load(as: UInt8.self))
    }
    guard let lease = pool.lease() else { Issue.record("no free frame"); return }
    lease.frame.data.storeBytes(of: 10, as: UInt8.self)
    chain.submit(lease.frame)
    chain.finish()
    #expect(out == [245])
}
