// The session's microphone: one optional `AudioDeviceInput` beside the camera. Its outputs are the
// connected outputs that take audio (the movie, an `AudioDataOutput`).

/// The session's microphone run: the engine while running, the counts of the last run.
struct AudioRun {
    var engine: AudioCaptureEngine?
    var last: AudioStatistics?
    /// A run's engine whose capture thread was given up on inside a read: the device is its until
    /// that read returns.
    var stuck: AudioCaptureEngine?
}

extension CaptureSession {
    func validateAudio(_ c: Configuration) throws {
        if c.inputs.filter({ $0 is AudioDeviceInput }).count > 1 {
            throw SessionError.cannotAddInput(reason: "the session already has an audio input (one microphone per session)")
        }
    }

    /// Before the video starts: negotiates the microphone's stream and tells the audio outputs its
    /// format (a movie recording that starts with the session then has its audio track).
    func prepareAudio(_ c: Configuration, connections: [CaptureConnection]) throws -> AudioCaptureEngine? {
        guard let input = c.inputs.compactMap({ $0 as? AudioDeviceInput }).first else { return nil }
        let consumers = connections.filter { $0.input === input && $0.isEnabled }.compactMap { $0.output as? AudioConsumer }
        let source = input.device.source
        // A read of the last run that never returned still holds the device: configuring it under
        // that read (or having it closed under the new run when it returns) is refused.
        if let stuck = audioRun.withLock({ $0.stuck }), stuck.source === source {
            if stuck.isHoldingSource { throw AudioError.deviceBusy(source.info.id) }
            audioRun.withLock { $0.stuck = nil }
        }
        let format = try source.configure(input.device.request)
        let engine = AudioCaptureEngine(source: source, format: format, consumers: consumers, logger: logger)
        engine.prepare()
        return engine
    }

    /// Starts the microphone's threads, before the video (the caller stops it again when the
    /// video cannot start). A device that fails later is reported as an interruption and a
    /// runtime error; the video goes on, and the movie keeps the sound captured so far.
    func startAudio(_ engine: AudioCaptureEngine?, hub: SessionEventHub) throws {
        // A run without a microphone has no sound counts (not the last run's).
        guard let engine else { audioRun.withLock { $0.last = nil }; return }
        engine.onRuntimeError = { error in
            if case AudioError.deviceGone = error { hub.post(.wasInterrupted(reason: .audioDeviceNotAvailable)) }
            hub.post(.runtimeError(error))
        }
        do {
            try engine.start()
        } catch {
            engine.source.close()
            // The outputs were told this device's format: they hear that its run is over.
            engine.abandon(error: error)
            throw error
        }
        audioRun.withLock { $0.engine = engine }
    }

    /// Stops the microphone of a run (after the video, so the movie gets the sound of its last
    /// frames) and keeps its counts. Once per engine: the first caller takes it out of `run`.
    static func stopAudio(_ engine: AudioCaptureEngine?, run: LockedBox<AudioRun>) {
        guard let engine else { return }
        let mine = run.withLock { r -> Bool in
            guard r.engine === engine else { return false }
            r.engine = nil
            return true
        }
        guard mine else { return }
        engine.stop()
        engine.waitUntilFinished()
        let s = engine.statistics
        run.withLock { $0.last = s; if engine.isHoldingSource { $0.stuck = engine } }
    }
}
