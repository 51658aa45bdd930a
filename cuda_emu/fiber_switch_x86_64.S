// The one piece of assembly of the CUDA emulation: switching the CPU between fibers (the
// emulated GPU threads of a block and the block scheduler), x86-64 System V.
//
// void vt_emu_fiber_switch(void** save_sp, void* load_sp)
//   Pushes the callee-saved registers (rbp, rbx, r12-r15) on the current stack, stores the stack
//   pointer in *save_sp, loads load_sp and pops the same frame from there. Caller-saved
//   registers need no saving: the switch is an ordinary call. The SSE/x87 control words are
//   not switched (they are slow to load): every fiber of a thread shares the thread's rounding
//   modes, which kernels never change.
//
// vt_emu_fiber_start
//   Where a fresh fiber's first switch returns to (fiber.cc builds that first frame):
//   calls r12(r13) on the fiber's own stack. The entry function never returns.
        .text
        .globl  vt_emu_fiber_switch
        .type   vt_emu_fiber_switch, @function
        .p2align 4
vt_emu_fiber_switch:
        .cfi_startproc
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .cfi_endproc
        .size   vt_emu_fiber_switch, .-vt_emu_fiber_switch

        .globl  vt_emu_fiber_start
        .type   vt_emu_fiber_start, @function
        .p2align 4
vt_emu_fiber_start:
        .cfi_startproc
        .cfi_undefined rip
        movq    %r13, %rdi
        callq   *%r12
        ud2
        .cfi_endproc
        .size   vt_emu_fiber_start, .-vt_emu_fiber_start

        .section .note.GNU-stack,"",@progbits
