import Testing
@testable import Viewfinder

@Suite struct RingSmoke { @Test func pushPop() { let r = SPSCRing<Int>(capacity: 4); #expect(r.push(1) == nil); #expect(r.pop() == 1) } }
