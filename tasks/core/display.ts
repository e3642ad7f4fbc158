/**
 * Text that came from somewhere else (a guest's agent, cloud-init, journald, a hypervisor) made safe
 * to print on a terminal: a guest can put escape sequences in what it says, and printed raw they
 * would recolour, retitle, rewrite or hide the operator's output (or, on some terminals, answer
 * back as typed input). What a terminal acts on is removed; the rest of the text is kept.
 */

/** CSI (ESC [ or the 8-bit U+009B): parameters, intermediates, one final byte. */
const CSI = /(?:\u001b\[|\u009b)[\u0030-\u003f]*[\u0020-\u002f]*[\u0040-\u007e]/g;
/**
 * Control strings (OSC, DCS, SOS, PM, APC; 7-bit or 8-bit) up to their terminator (BEL, ST as
 * ESC \ or U+009C): the whole string goes, payload and all. One with no terminator loses only its
 * introducer below, and what follows is shown as text.
 */
const CONTROL_STRING = /(?:\u001b[\]PX^_]|[\u009d\u0090\u0098\u009e\u009f])[^\u0007\u001b\u009c]*(?:\u0007|\u001b\\|\u009c)/g;
/** The other escape sequences: ESC, intermediates, one final byte (ESC c resets the terminal; ESC ( 0 switches its character set). */
const ESCAPE = /\u001b[\u0020-\u002f]*[\u0030-\u007e]/g;
/** What is left: C0 controls but tab and newline (so carriage return and backspace too), DEL, C1 controls, a lone ESC. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/** `text` without terminal control sequences or control characters; newlines and tabs are kept. */
export function forDisplay(text: string): string {
  return text.replace(CONTROL_STRING, '').replace(CSI, '').replace(ESCAPE, '').replace(CONTROL, '');
}
